//! The machines and their driver allocate nothing per step: an operation
//! that takes many batches allocates exactly as much as one that takes a
//! few (what the public API returns, a `Vec` of outcomes and the found
//! values, is per operation, not per step).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::{key, local_tables, small, value, VARIANTS};

/// Counts this thread's allocations (other test threads do not disturb it).
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// count is a thread-local Cell, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `alloc` above, that is from System.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        // SAFETY: as above.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|a| a.get())
}

#[test]
fn an_operation_allocates_the_same_whatever_its_number_of_steps() {
    for variant in VARIANTS {
        // A nearly full table: keys probe anything from one candidate (or
        // chunk) to all of them.
        let mut cfg = small(variant, 16);
        cfg.candidates = 6;
        cfg.chunk = 2;
        let tables = local_tables(1, cfg);
        let d = &tables[0];
        let keys: Vec<Vec<u8>> = (0..40).map(key).collect();
        let vals: Vec<Vec<u8>> = keys.iter().map(|k| value(k, 0, 0, 24)).collect();
        for (k, v) in keys.iter().zip(&vals) {
            d.write(k, v).unwrap();
        }
        // Warm: the table's buffers have grown to what one key needs.
        for k in &keys {
            d.read(k).unwrap();
        }
        let mut seen = std::collections::BTreeMap::<u64, u64>::new();
        for (k, v) in keys.iter().zip(&vals) {
            for write in [false, true] {
                let (b0, a0) = (d.stats().batches, allocs());
                if write {
                    d.write(k, v).unwrap();
                } else {
                    d.read(k).unwrap();
                }
                let (b1, a1) = (d.stats().batches, allocs());
                let per_op = a1 - a0;
                let batches = b1 - b0;
                let o = seen.entry(batches).or_insert(per_op);
                // Reads and writes differ by what the API returns; take
                // the larger, and require it never to grow with steps.
                *o = (*o).max(per_op);
            }
        }
        let counts: Vec<u64> = seen.values().copied().collect();
        assert!(
            seen.len() >= 3,
            "{variant:?}: too few different step counts to compare: {seen:?}"
        );
        let most = *counts.iter().max().unwrap();
        // A read allocates its outcome list and the found value; a write
        // its key list, value list and outcome list: 3 at most, at 1 batch
        // or at 25.
        assert!(
            most <= 3,
            "{variant:?}: an operation allocated {most} times; by batches per operation: {seen:?}"
        );
        eprintln!("{variant:?}: allocations by batches per operation: {seen:?}");
        // The caller-buffer forms allocate nothing at all once warm.
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let vrefs: Vec<&[u8]> = vals.iter().map(|v| &v[..]).collect();
        let mut values = vec![0u8; 24 * keys.len()];
        let mut found = vec![fabkit_dht::Found::Miss; keys.len()];
        let mut wrote = vec![fabkit_dht::Write::Inserted; keys.len()];
        d.read_into(&refs, &mut values, &mut found).unwrap();
        d.write_into(&refs, &vrefs, &mut wrote).unwrap();
        let a0 = allocs();
        for _ in 0..3 {
            d.read_into(&refs, &mut values, &mut found).unwrap();
            d.write_into(&refs, &vrefs, &mut wrote).unwrap();
        }
        assert_eq!(
            allocs() - a0,
            0,
            "{variant:?}: read_into/write_into allocated"
        );
        let hits = found
            .iter()
            .filter(|f| **f == fabkit_dht::Found::Hit)
            .count();
        assert!(hits > 0, "{variant:?}: {found:?}");
    }
}
