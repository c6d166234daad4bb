//! The message path over MPI point-to-point: [`fabkit_mpi::Mailbox`]'s
//! requests and replies on a communicator of its own, where MPI gives
//! `MPI_THREAD_MULTIPLE`.

use std::time::{Duration, Instant};

use fabkit_mpi::{Call, Mailbox};

use super::Messenger;

impl Messenger for Mailbox {
    type Error = fabkit_mpi::Error;
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
        "MPI point-to-point".into()
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
    /// MPI matches a message to its sender within the communicator: every
    /// request comes from a member.
    fn serve(
        &self,
        wait: Duration,
        f: &mut dyn FnMut(Option<usize>, &[u8]),
    ) -> Result<usize, Self::Error> {
        Mailbox::serve(self, wait, &mut |from, bytes| f(Some(from), bytes))
    }
    fn answer(&self, to: usize, id: u64, reply: &[u8]) -> Result<(), Self::Error> {
        Mailbox::answer(self, to, id, reply)
    }
    fn wake(&self) {
        Mailbox::wake(self)
    }
}
