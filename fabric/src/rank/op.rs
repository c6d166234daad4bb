//! The [`Rank`] shorthands that execute a single operation.

use super::Rank;
use crate::error::Result;
use fabkit_core::{Completion, Op, Remote};

impl Rank {
    /// Reads `into.len()` bytes at `from`.
    pub fn read(&self, from: Remote, into: &mut [u8]) -> Result<()> {
        self.execute(&mut [Op::Read { from, into }])
    }

    /// Writes `data` at `to`, transmit-complete ([`Completion::Transmit`]).
    pub fn write(&self, to: Remote, data: &[u8]) -> Result<()> {
        self.write_with(to, data, Completion::Transmit)
    }

    /// Writes `data` at `to` with the completion it needs.
    pub fn write_with(&self, to: Remote, data: &[u8], completion: Completion) -> Result<()> {
        self.execute(&mut [Op::Write {
            to,
            from: data,
            completion,
        }])
    }

    /// Executes one atomic whose result lands in the u64 it is given.
    fn one_atomic(&self, op: impl for<'a> FnOnce(&'a mut u64) -> Op<'a>) -> Result<u64> {
        let mut out = 0;
        self.execute(&mut [op(&mut out)])?;
        Ok(out)
    }

    /// Atomic compare-and-swap; returns the previous value (the swap
    /// happened if it equals `expected`).
    pub fn compare_and_swap(&self, at: Remote, expected: u64, new: u64) -> Result<u64> {
        self.one_atomic(|old| Op::CompareAndSwap {
            at,
            expected,
            new,
            old,
        })
    }

    /// Atomic fetch-and-add; returns the previous value.
    pub fn fetch_add(&self, at: Remote, delta: u64) -> Result<u64> {
        self.one_atomic(|old| Op::FetchAdd { at, delta, old })
    }

    /// Atomic read.
    pub fn fetch(&self, at: Remote) -> Result<u64> {
        self.one_atomic(|value| Op::Fetch { at, value })
    }

    /// Atomic swap; returns the previous value.
    pub fn swap(&self, at: Remote, new: u64) -> Result<u64> {
        self.one_atomic(|old| Op::Swap { at, new, old })
    }
}
