//! The message path over libfabric: [`fabkit_fabric::Mailbox`]'s tagged
//! requests and replies, with each request's source checked against the
//! job's addresses.

use std::time::{Duration, Instant};

use fabkit_fabric::{Call, Mailbox};

use super::Messenger;

impl Messenger for Mailbox {
    type Error = fabkit_fabric::Error;
    type Call = Call;

    fn rank(&self) -> usize {
        Mailbox::rank(self)
    }
    fn ranks(&self) -> usize {
        Mailbox::ranks(self)
    }
    fn max_len(&self) -> usize {
        Mailbox::max_len(self)
    }
    fn name(&self) -> String {
        format!("libfabric {} messages", self.provider())
    }
    fn call(&self, to: usize, id: u64, request: &[u8]) -> Result<Call, Self::Error> {
        Mailbox::call(self, to, id, request)
    }
    fn ready(&self, call: &Call) -> bool {
        Mailbox::ready(self, call)
    }
    fn wait_reply(
        &self,
        call: Call,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), Self::Error> {
        Mailbox::wait_reply(self, call, deadline, f)
    }
    fn serve(
        &self,
        wait: Duration,
        f: &mut dyn FnMut(Option<usize>, &[u8]),
    ) -> Result<usize, Self::Error> {
        Mailbox::serve(self, wait, f)
    }
    fn answer(&self, to: usize, id: u64, reply: &[u8]) -> Result<(), Self::Error> {
        Mailbox::answer(self, to, id, reply)
    }
    fn wake(&self) {
        Mailbox::wake(self)
    }
    fn dropped(&self) -> u64 {
        let c = self.counts();
        c.oversized + c.failed
    }
}
