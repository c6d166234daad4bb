//! What C sees: the MPI-DHT's return codes, `DHT_init_t` and the callback
//! types with their values and layouts, and fabkit's own structs. Each
//! mirrors a definition in `include/LUCX/MPI/DHT.h`; `tests/header.rs`
//! compiles the header against these values and layouts.

use std::ffi::{c_char, c_int, c_uint, c_void};

use fabkit_dht::Write;
use mpi::ffi::MPI_Comm;

/// Success.
pub const DHT_SUCCESS: c_int = 0;
/// Any failure of the machinery (the MPI-DHT's name for it).
pub const DHT_UCX_ERROR: c_int = -1;
/// No bucket holds the key.
pub const DHT_READ_MISS: c_int = -2;
/// The key's bucket kept failing its checksum.
pub const DHT_READ_CORRUPT: c_int = -3;
/// (The MPI-DHT's; fabkit never returns it.)
pub const DHT_READ_INVALID: c_int = -4;
/// The write pushed another key out.
pub const DHT_WRITE_SUCCESS_WITH_EVICTION: c_int = -5;
/// The files are not a dump of a table like this one.
pub const DHT_WRONG_FILE: c_int = -11;
/// Reading or writing the dump's files failed.
pub const DHT_FILE_IO_ERROR: c_int = -12;
/// (The MPI-DHT's; fabkit says `DHT_FILE_IO_ERROR`.)
pub const DHT_FILE_READ_ERROR: c_int = -13;
/// (The MPI-DHT's; fabkit says `DHT_FILE_IO_ERROR`.)
pub const DHT_FILE_WRITE_ERROR: c_int = -14;
/// (The MPI-DHT's; fabkit never returns it.)
pub const DHT_NO_MEM: c_int = -15;
/// Not offered by this table's variant.
pub const DHT_NOT_IMPLEMENTED: c_int = -32;

/// Every code, by name, as the header defines it.
pub const CODES: [(&str, c_int); 12] = [
    ("DHT_SUCCESS", DHT_SUCCESS),
    ("DHT_UCX_ERROR", DHT_UCX_ERROR),
    ("DHT_READ_MISS", DHT_READ_MISS),
    ("DHT_READ_CORRUPT", DHT_READ_CORRUPT),
    ("DHT_READ_INVALID", DHT_READ_INVALID),
    (
        "DHT_WRITE_SUCCESS_WITH_EVICTION",
        DHT_WRITE_SUCCESS_WITH_EVICTION,
    ),
    ("DHT_WRONG_FILE", DHT_WRONG_FILE),
    ("DHT_FILE_IO_ERROR", DHT_FILE_IO_ERROR),
    ("DHT_FILE_READ_ERROR", DHT_FILE_READ_ERROR),
    ("DHT_FILE_WRITE_ERROR", DHT_FILE_WRITE_ERROR),
    ("DHT_NO_MEM", DHT_NO_MEM),
    ("DHT_NOT_IMPLEMENTED", DHT_NOT_IMPLEMENTED),
];

/// A write's outcome as the MPI-DHT's code.
pub(crate) fn write_code(w: Write) -> c_int {
    match w {
        Write::Evicted => DHT_WRITE_SUCCESS_WITH_EVICTION,
        Write::Inserted | Write::Updated => DHT_SUCCESS,
    }
}

/// The caller's hash function: key size in bytes, key.
pub type HashFunc = unsafe extern "C" fn(c_int, *const c_void) -> u64;

/// An accumulation: (size of the data sent, the data, size of the value,
/// the value to update in place); 0 to store the updated value.
pub type AccumulateFunc = unsafe extern "C" fn(c_int, *mut c_void, c_int, *mut c_void) -> c_int;

/// What `DHT_create` takes, field for field as the MPI-DHT's header.
#[repr(C)]
#[derive(Debug)]
#[allow(non_camel_case_types)]
pub struct DHT_init_t {
    /// Bytes of a key.
    pub key_size: c_int,
    /// Bytes of a value.
    pub data_size: c_int,
    /// Buckets on each rank.
    pub bucket_count: c_uint,
    /// The caller's hash, or null for fabkit's.
    pub hash_func: Option<HashFunc>,
    /// The ranks that share the table.
    pub comm: MPI_Comm,
}

/// fabkit's choices for a table (`fabkit_dht_create`): each field a
/// string, or null for its environment variable, else its default.
#[repr(C)]
#[derive(Debug)]
#[allow(non_camel_case_types)]
pub struct fabkit_dht_options_t {
    /// `lockfree`, `fine`, `coarse` or `chunked` (`FABKIT_DHT_VARIANT`).
    pub variant: *const c_char,
    /// `mpi`, `fabric` or `shm` (`FABKIT_DHT_TRANSPORT`).
    pub transport: *const c_char,
    /// The libfabric provider of `fabric` and `shm` (`FABKIT_DHT_PROVIDER`).
    pub provider: *const c_char,
    /// Its domain: an interface, a device or a network
    /// (`FABKIT_DHT_DOMAIN`).
    pub domain: *const c_char,
}

/// A table's counters (`fabkit_dht_stats`), as `fabkit_dht::Stats`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct fabkit_dht_stats_t {
    /// Keys read.
    pub reads: u64,
    /// Keys written (accumulations included).
    pub writes: u64,
    /// Reads that found their key.
    pub hits: u64,
    /// Reads that did not.
    pub misses: u64,
    /// Reads whose bucket kept failing its checksum.
    pub corrupt: u64,
    /// Writes into an empty bucket.
    pub inserts: u64,
    /// Writes over the same key.
    pub updates: u64,
    /// Writes that pushed another key out.
    pub evictions: u64,
    /// Re-reads after a failed checksum.
    pub checksum_retries: u64,
    /// Damaged buckets given up on and cleared (lock-free).
    pub invalidations: u64,
    /// Lock or claim attempts that found it taken.
    pub lock_retries: u64,
    /// One-sided operations issued.
    pub remote_ops: u64,
    /// Batches of them.
    pub batches: u64,
    /// Bytes they moved.
    pub remote_bytes: u64,
    /// Of `remote_ops`: the ones aimed at this rank itself.
    pub self_ops: u64,
    /// Of `remote_ops`: reads aimed at other ranks.
    pub cross_reads: u64,
    /// Of `remote_ops`: writes aimed at other ranks.
    pub cross_writes: u64,
    /// Of `remote_ops`: atomics aimed at other ranks.
    pub cross_atomics: u64,
}

impl From<fabkit_dht::Stats> for fabkit_dht_stats_t {
    fn from(s: fabkit_dht::Stats) -> Self {
        fabkit_dht_stats_t {
            reads: s.reads,
            writes: s.writes,
            hits: s.hits,
            misses: s.misses,
            corrupt: s.corrupt,
            inserts: s.inserts,
            updates: s.updates,
            evictions: s.evictions,
            checksum_retries: s.checksum_retries,
            invalidations: s.invalidations,
            lock_retries: s.lock_retries,
            remote_ops: s.remote_ops,
            batches: s.batches,
            remote_bytes: s.remote_bytes,
            self_ops: s.self_ops,
            cross_reads: s.cross_reads,
            cross_writes: s.cross_writes,
            cross_atomics: s.cross_atomics,
        }
    }
}
