//! A distributed hash table that lives in the memory of the application's
//! own ranks and is read and written with one-sided operations: no server,
//! no target CPU involvement beyond progress. It is the MPI-DHT of Lübke,
//! Schnor et al. ("A fast MPI-based Distributed Hash Table as Surrogate
//! Model for HPC Applications": coarse-grained lock, fine-grained lock,
//! lock-free with checksums; a surrogate-model cache in the POET
//! simulator) plus the chunked linear probing of Oortwijn's "A Distributed
//! Hash Table for Shared Memory".
//!
//! Layers, bottom up (smoltcp-style: pure logic above a transport seam):
//! - [`layout`]: bucket bytes <-> [`layout::Bucket`], CRC32C; pure.
//! - [`placement`]: key -> rank and candidate buckets, unbiased; pure.
//! - [`transport`]: the [`Transport`] trait the variants run on: native
//!   libfabric (`fabkit_fabric::Rank`, feature `fabric`), MPI windows
//!   (feature `mpi`), and test doubles (local, recording, faulty).
//! - `variant` (private): each algorithm as a state machine that plans
//!   batches of remote operations into buffers the table owns, is fed their
//!   completions and the time, and gives back every lock and claim on error.
//! - [`Dht`]: create (collective, all ranks must agree), read, write, their
//!   batched forms, statistics, dump and restore (also into another size,
//!   rank count or variant), free; the only driver of the machines.
//! - [`clock`]: the time the driver passes in, real or a test's.
//! - Outcomes, errors and statistics sit in a leaf module both use.
//!
//! ```
//! use fabkit_dht::{transport::local::LocalTransport, Config, Dht, Read, Variant};
//! use fabkit_core::bootstrap::ThreadGroup;
//! use std::time::Duration;
//!
//! let mut cfg = Config::new(Variant::Lockfree);
//! (cfg.key_len, cfg.value_len, cfg.buckets) = (8, 16, 64);
//! let t = LocalTransport::group(1, cfg.region_len()).pop().unwrap();
//! let boot = ThreadGroup::members(1, Duration::from_secs(5)).pop().unwrap();
//! let dht = Dht::create(t, cfg, &boot).unwrap();
//! dht.write(b"key-0001", b"value-0000000001").unwrap();
//! assert_eq!(dht.read(b"key-0001").unwrap(), Read::Hit(b"value-0000000001".to_vec()));
//! assert_eq!(dht.read(b"key-0002").unwrap(), Read::Miss);
//! ```
//!
//! # Variants, and what each guarantees
//!
//! | variant | consistency | remote operations |
//! |---|---|---|
//! | `coarse` | a lock word on the region (MPI: `MPI_Win_lock`), taken once per rank per batch by writers; readers take nothing and re-read if it moved | writer: lock, reads, writes, unlock; reader: word, reads, word |
//! | `fine` | a lock word per bucket, taken by writers; readers take nothing and re-read if it moved | writer: lock, read, [write], unlock; reader: word, read, word (one batch where the transport keeps a batch's order) |
//! | `lockfree` | CRC32 of key and value; re-read on mismatch (also when the key differs), then look again after a pause and mark invalid only the same failing bytes | a hit on the first candidate is one read |
//! | `chunked` | every store under a CAS claim of the bucket's state word (tagged with its claimer), fill, publish by CAS from the claim; CRC-verified reads | two chunks per round trip |
//!
//! What each variant guarantees, on any provider (the crate's tests check
//! each line):
//!
//! | variant | a read returns | concurrent writers of one key | inserts of one key racing |
//! |---|---|---|---|
//! | `coarse`, `fine` | a whole record written by some writer (the lock excludes torn reads) | one of the written values, whole | once |
//! | `chunked` | a whole record (CRC32 verified; a torn one is re-read, then reported `Corrupt`) | one of the written values, whole, never `Corrupt` | once, even past a claimer stalled beyond the deadline (`find_or_put`) |
//! | `lockfree` | a whole record up to its CRC32, or `Corrupt`, or a miss | may lose writes or leave the bucket torn (`Corrupt`); never a foreign value | may insert twice or lose one |
//!
//! A torn lock-free or chunked record (the front of one write spliced to the
//! back of another) passes its CRC32 with probability about 2^-32 per distinct
//! splice. Re-reading the same splice gives the same answer, so the odds are
//! per tear a writer makes, not per read: tears need a read or write racing a
//! write of the same bucket, which the locking variants exclude.
//!
//! - **Ordering.** A completed RMA write is, by default, only
//!   transmit-complete (fi_cq(3)): its data may become visible at the target
//!   after the compare-and-swap that releases it. Every DHT store asks for
//!   delivery completion, which the fabric transport maps to
//!   `FI_DELIVERY_COMPLETE`, else `FI_FENCE` on the next operation to that
//!   peer (the release: narrower, it orders this rank's own release only),
//!   else a read-back under `FI_ORDER_RMA_RAW`, whichever the provider offers
//!   first (`fabkit info`, column `order`; every provider here gives
//!   delivery), and the MPI transport gets from its `MPI_Win_flush` after
//!   every batch. A provider that offers none is refused by `Dht::create`,
//!   by name.
//! - **Chunked claims.** Updates and evictions claim the full bucket before
//!   writing (an update that wrote over a full bucket could interleave with
//!   another and leave it torn for good). Readers never wait on a claim: one
//!   taken of an empty bucket is a miss, one of a full bucket still shows the
//!   whole old record. Writers do not pass a claim that may be getting their
//!   key; a claim seen unchanged for a whole deadline is taken over by
//!   compare-and-swap, and its stalled claimer's publish, a compare-and-swap
//!   from its own claim, then fails and it starts again (so no key is stored
//!   twice and no bucket stays claimed). A writer that meets a stale claim
//!   may so take up to twice its deadline. The takeover assumes a claimer's
//!   write lands within a deadline of its claim: a write stalled longer (a
//!   claimer frozen between claim and write) lands over the taker's record
//!   with its own whole record of the same bucket, so the taker's value may be
//!   replaced by the stalled one (still one copy, never torn for good). A full
//!   state word counts its publications, so a claim from a full value seen
//!   earlier fails if the bucket was rewritten since. A key's chunks start at
//!   its distinct candidate buckets (uniform; the published quadratic steps
//!   of C buckets reach only part of the region unless B / C is a power of
//!   two) and wrap past the region's end.
//! - **Lock-free invalidation.** A reader marks a bucket invalid only after a
//!   last look, a pause later, shows the same failing bytes; it adds the
//!   invalid bit to the occupied one, and a record whose checksum passes
//!   counts whatever the bit says, so a write that lands before (or just
//!   after) the mark is never hidden. A writer reuses a damaged bucket only
//!   after the candidates beyond it are known not to hold its key, so no
//!   older copy is left to come back.
//! - **Distinct candidates.** A key's candidate buckets are drawn without
//!   replacement (drawn independently, 8 candidates in 256 buckets repeat one
//!   for about 10 % of keys).
//!
//! Each variant is a state machine that does no I/O: it plans a batch of
//! remote operations into buffers the table owns and reuses (no allocation
//! per step), is fed the completions and the time, and plans the next. What it
//! holds is state, not control flow, so an error always gives it back:
//!
//! - **Tagged holds.** A lock word is `version << 36 | tag`, the tag naming
//!   the writer's rank and a sequence number (0 is free). A writer takes it by
//!   compare-and-swap from the free value to the value with its tag, and gives
//!   it back by compare-and-swap from exactly that value (to the next version
//!   if it wrote). A chunked claim carries the same tag.
//! - **Release on error.** A failed batch may or may not have reached its
//!   targets, so after an error every hold a key has *or may have* is given
//!   back by that compare-and-swap, which does nothing if it was never taken;
//!   a write under a lock whose batch failed is rewritten before the lock goes.
//!   Releases are retried (1 ms apart) for one more deadline.
//! - **Readers take nothing** (fine, coarse): a sequence lock on the same word.
//!   A stream of readers cannot starve a writer, and a failed reader holds
//!   nothing. The MPI-DHT's readers fetch-add a count into the word instead; an
//!   increment whose batch failed could be neither kept nor safely undone.
//!   The cost: a write to a bucket written before guesses the free value
//!   wrong once (one more compare-and-swap).
//! - **Deadlines.** Every wait (a lock, a claim, a consistent re-read) ends at
//!   the operation's deadline (`Dht::set_deadline`, default 30 s times
//!   `FABKIT_TIMEOUT_SCALE`) with an error naming the key, rank, bucket and
//!   holder: `write of key 6b65792d303030303030303030303031 gave up after
//!   30s: the lock (bucket 17) on rank 1 (held by rank 7)`. A hold found
//!   not to be its owner's when given back is an error too, never a silent
//!   success. Time comes from a [`clock::Clock`]; tests use
//!   [`clock::TestClock`], so deadlines are tested without sleeping.
//! - **Tested under faults.** [`transport::faulty::FaultyTransport`] wraps
//!   any transport and, from a seed, reorders a batch, splits reads and
//!   tears them with a concurrent writer, delays a write's visibility past
//!   its completion, fails the Nth operation (which may or may not have
//!   taken effect), and keeps batches of several lanes in flight, run in
//!   another order than posted. The tests:
//!   - run every variant against a HashMap model under these faults (a
//!     fixed seed by default; `FABKIT_TEST_SEED` replays or explores);
//!   - fail every operation of every variant's insert, update, read and
//!     find-or-put in turn, and check that nothing stays held and that
//!     another rank's next operation on the bucket succeeds;
//!   - count allocations per operation at 1 to 25 batches.
//!
//! Placement fixes a bias of the published MPI-DHT: the rank and each
//! candidate bucket come from independent remixes of the key hash, so every
//! candidate reaches every bucket with equal probability whatever the rank
//! count (with `hash mod 4` and byte windows of the same hash, three quarters of
//! a region are unreachable from the first candidate; the tests show both).
//! Lock-free writers racing for one empty bucket may lose an insert (the table
//! is a cache); fine, coarse and chunked never do. No variant returns a torn
//! value (up to the CRC32 above): the tests tear reads on purpose, and
//! `fabkit dht` ends each variant with every rank updating one hot key at once
//! (`--hot-rounds`, the `hot key` line).
//!
//! An accumulation under the bucket's hold, on a variant that holds one
//! (lock-free holds nothing, so its tables refuse it):
//!
//! ```
//! use fabkit_dht::{transport::local::LocalTransport, Config, Dht, Error, Variant, Write};
//! use fabkit_core::bootstrap::ThreadGroup;
//! use std::time::Duration;
//!
//! let table = |v| {
//!     let mut cfg = Config::new(v);
//!     (cfg.key_len, cfg.value_len, cfg.buckets) = (8, 8, 64);
//!     let t = LocalTransport::group(1, cfg.region_len()).pop().unwrap();
//!     let boot = ThreadGroup::members(1, Duration::from_secs(5)).pop().unwrap();
//!     Dht::create(t, cfg, &boot).unwrap()
//! };
//! let fine = table(Variant::Fine);
//! let add = |v: &mut [u8]| {
//!     let n = u64::from_le_bytes(v.try_into().unwrap()) + 1;
//!     v.copy_from_slice(&n.to_le_bytes());
//!     true
//! };
//! assert_eq!(fine.update(b"counter!", add).unwrap(), Write::Inserted);
//! assert_eq!(fine.update(b"counter!", add).unwrap(), Write::Updated);
//! let two = 2u64.to_le_bytes().to_vec();
//! assert_eq!(fine.read(b"counter!").unwrap(), fabkit_dht::Read::Hit(two));
//! let lockfree = table(Variant::Lockfree);
//! assert!(matches!(lockfree.update(b"counter!", add), Err(Error::Config(_))));
//! ```
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod clock;
pub mod collective;
mod config;
mod dump;
pub mod layout;
pub mod message;
#[cfg(feature = "fabric")]
pub mod open;
mod outcome;
pub mod path;
pub mod placement;
mod table;
pub mod transport;
mod variant;

pub use config::{Config, MAX_DEADLINE, MAX_FIELD};
pub use dump::{Dumped, Restored, FORMAT_VERSION, MAX_SHARDS};
pub use layout::Variant;
pub use outcome::{Error, FindOrPut, Found, Read, Result, Stats, Write, COUNTERS};
pub use path::Path;
pub use placement::KeyHash;
pub use table::{fits_a_message, Dht, LANE_KEYS, MAX_DEPTH, MAX_MESSAGE};
pub use transport::Transport;
