//! One way for a transport to wrap another. The test doubles that hook,
//! record or fault another transport's batches, and a shared reference to
//! any transport, implement [`Wrapper`]: the inner transport, a name, and
//! only the hooks whose behaviour they change. One `impl Transport` for
//! every wrapper, here, passes each [`Transport`] method to its hook, and
//! each hook passes it on to the inner transport unless the wrapper
//! overrides it. So a method added to [`Transport`] is forwarded in one
//! place for all of them (clippy's `missing_trait_methods`, denied on that
//! impl, fails the build until it is), and no wrapper can miss it: the
//! recording transport once lost the region lock that way.
//!
//! Call a wrapper through [`Transport`] alone: with [`Wrapper`] in scope
//! too, the methods both traits name are ambiguous. So wrappers implement
//! it by path (`impl super::wrap::Wrapper for …`), which keeps it out of
//! their modules' scope, and inside that impl, where it is in scope, name
//! the trait (`Transport::execute(self, ops)`).

use super::{Caps, Op, Transport};

/// A wrapper's error: its inner transport's.
pub type WrapperError<W> = <<W as Wrapper>::Inner as Transport>::Error;

/// A wrapper's lane: its own part and its inner transport's.
pub type WrapperLane<W> =
    WrapLane<<W as Wrapper>::OwnLane, <<W as Wrapper>::Inner as Transport>::Lane>;

/// Where a wrapper keeps a batch in flight ([`Transport::Lane`]): what the
/// wrapper itself keeps of it, and the inner transport's lane, on which
/// the hooks post by default.
#[derive(Debug, Default)]
pub struct WrapLane<O, I> {
    /// The wrapper's own part: `()` unless it holds batches back itself.
    pub own: O,
    /// The inner transport's lane.
    pub inner: I,
}

/// A transport made of another: everything it does not override is the
/// inner transport's. Each hook is the [`Transport`] method of the same
/// name; the rank, the rank count and the region lengths are always the
/// inner transport's.
pub trait Wrapper: Sized {
    /// The wrapped transport.
    type Inner: Transport + ?Sized;
    /// What the wrapper itself keeps of a batch in flight, in its
    /// [`WrapLane`]: `()` unless it holds batches back.
    type OwnLane: Default + Send;

    /// The wrapped transport.
    fn inner(&self) -> &Self::Inner;

    /// A short name for reports: the inner transport's, after what the
    /// wrapper does to it ("recording local").
    fn name(&self) -> String;

    /// See [`Transport::caps`].
    fn caps(&self) -> Caps {
        self.inner().caps()
    }

    /// See [`Transport::by_memory`].
    fn by_memory(&self, rank: usize) -> bool {
        self.inner().by_memory(rank)
    }

    /// See [`Transport::execute`].
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<(), WrapperError<Self>> {
        self.inner().execute(ops)
    }

    /// See [`Transport::lane`]: the inner transport's lane, and a default
    /// own part.
    fn lane(&self) -> Result<WrapperLane<Self>, WrapperError<Self>> {
        Ok(WrapLane {
            own: Self::OwnLane::default(),
            inner: self.inner().lane()?,
        })
    }

    /// See [`Transport::post`].
    fn post(
        &self,
        lane: &mut WrapperLane<Self>,
        ops: &mut [Op<'_>],
    ) -> Result<bool, WrapperError<Self>> {
        self.inner().post(&mut lane.inner, ops)
    }

    /// See [`Transport::ready`].
    fn ready(&self, lane: &WrapperLane<Self>) -> bool {
        self.inner().ready(&lane.inner)
    }

    /// See [`Transport::complete`].
    fn complete(
        &self,
        lane: &mut WrapperLane<Self>,
        ops: &mut [Op<'_>],
    ) -> Result<(), WrapperError<Self>> {
        self.inner().complete(&mut lane.inner, ops)
    }

    /// See [`Transport::lock_region`].
    fn lock_region(&self, rank: usize, exclusive: bool) -> Result<bool, WrapperError<Self>> {
        self.inner().lock_region(rank, exclusive)
    }

    /// See [`Transport::unlock_region`].
    fn unlock_region(&self, rank: usize) -> Result<(), WrapperError<Self>> {
        self.inner().unlock_region(rank)
    }
}

/// Every [`Transport`] method of every wrapper: the inner transport's
/// facts, and each hook. Every method is spelled out, none left to the
/// trait's defaults, which would answer for the inner transport without
/// asking it.
#[deny(clippy::missing_trait_methods)]
impl<W: Wrapper> Transport for W {
    type Error = WrapperError<W>;
    type Lane = WrapperLane<W>;

    fn rank(&self) -> usize {
        self.inner().rank()
    }
    fn ranks(&self) -> usize {
        self.inner().ranks()
    }
    fn region_len(&self, rank: usize) -> usize {
        self.inner().region_len(rank)
    }
    fn caps(&self) -> Caps {
        Wrapper::caps(self)
    }
    fn by_memory(&self, rank: usize) -> bool {
        Wrapper::by_memory(self, rank)
    }
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<(), Self::Error> {
        Wrapper::execute(self, ops)
    }
    fn name(&self) -> String {
        Wrapper::name(self)
    }
    fn lane(&self) -> Result<Self::Lane, Self::Error> {
        Wrapper::lane(self)
    }
    fn post(&self, lane: &mut Self::Lane, ops: &mut [Op<'_>]) -> Result<bool, Self::Error> {
        Wrapper::post(self, lane, ops)
    }
    fn ready(&self, lane: &Self::Lane) -> bool {
        Wrapper::ready(self, lane)
    }
    fn complete(&self, lane: &mut Self::Lane, ops: &mut [Op<'_>]) -> Result<(), Self::Error> {
        Wrapper::complete(self, lane, ops)
    }
    fn lock_region(&self, rank: usize, exclusive: bool) -> Result<bool, Self::Error> {
        Wrapper::lock_region(self, rank, exclusive)
    }
    fn unlock_region(&self, rank: usize) -> Result<(), Self::Error> {
        Wrapper::unlock_region(self, rank)
    }
}

/// A shared reference is the transport it refers to, unchanged.
impl<T: Transport + ?Sized> Wrapper for &T {
    type Inner = T;
    type OwnLane = ();

    fn inner(&self) -> &T {
        self
    }
    fn name(&self) -> String {
        (**self).name()
    }
}
