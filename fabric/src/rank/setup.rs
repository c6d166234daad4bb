//! Establishing a rank: checking the configuration, opening the provider,
//! exposing the region, exchanging peer cards (their wire format is
//! [`Card`]) through the bootstrap, inserting every peer's address, and
//! starting the progress thread; and finishing the job.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::data::ATOMIC_STAGE;
use super::ordering::FenceBook;
use super::{Peer, ProgressMode, Rank, RankConfig};
use crate::av::AddressVector;
use crate::bootstrap::Bootstrap;
use crate::cq::{CompletionQueue, CqInner};
use crate::domain::{Domain, Fabric};
use crate::ep::Endpoint;
use crate::error::{Error, Result};
use crate::info::{self, Caps, Hints, Progress};
use crate::mr::RemoteRegion;
use fabkit_core::Error as CoreError;

pub(super) struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl ProgressThread {
    fn start(cq: Arc<CqInner>, rank: usize) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("fabkit-progress-{rank}"))
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    // Blocks in the kernel (fi_cq_sread) where the provider
                    // has a wait object: progress without burning a core.
                    cq.progress_step(Duration::from_millis(20));
                }
            })
            .map_err(|source| {
                Error::from(CoreError::Io {
                    what: "starting the progress thread".into(),
                    cause: source,
                })
            })?;
        Ok(ProgressThread {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// What a rank tells its peers at start-up.
struct Card {
    provider: String,
    name: Vec<u8>,
    region: RemoteRegion,
}

impl Card {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        for part in [self.provider.as_bytes(), &self.name] {
            v.extend_from_slice(&(part.len() as u32).to_le_bytes());
            v.extend_from_slice(part);
        }
        for x in [self.region.base, self.region.len, self.region.key] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }

    fn decode(b: &[u8], rank: usize) -> Result<Card> {
        let bad = || {
            Error::from(CoreError::Bootstrap(format!(
                "rank {rank} sent a malformed address card"
            )))
        };
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8]> {
            let s = b.get(at..at + n).ok_or_else(bad)?;
            at += n;
            Ok(s)
        };
        let mut part = || -> Result<Vec<u8>> {
            let n = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
            Ok(take(n)?.to_vec())
        };
        let provider = String::from_utf8(part()?).map_err(|_| bad())?;
        let name = part()?;
        let mut word = || -> Result<u64> { Ok(u64::from_le_bytes(take(8)?.try_into().unwrap())) };
        let region = RemoteRegion {
            base: word()?,
            len: word()?,
            key: word()?,
        };
        Ok(Card {
            provider,
            name,
            region,
        })
    }
}

impl Rank {
    /// Opens the provider, exposes a region and exchanges addresses with all
    /// ranks. Collective: every rank of `boot` must call it.
    pub fn establish(mut cfg: RankConfig, boot: &dyn Bootstrap) -> Result<Rank> {
        cfg.timeout = crate::env::scaled(cfg.timeout);
        if cfg.window == 0 {
            return Err(Error::from(CoreError::InvalidArgument(
                "window must be at least 1 operation in flight".into(),
            )));
        }
        if cfg.staging_len < ATOMIC_STAGE {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "staging buffer of {} B is too small; use at least 4096",
                cfg.staging_len
            ))));
        }
        let caps = if cfg.atomics { Caps::ALL } else { Caps::RMA };
        let hints = Hints {
            provider: Some(cfg.provider.clone()),
            domain: cfg.domain.clone(),
            caps,
            ordering: info::Ordering::None,
        };
        let same_host = boot.same_host()?;
        // The endpoint is opened from an info that asked for the ordering
        // mechanism it will use (FI_DELIVERY_COMPLETE in op_flags, the
        // FI_FENCE capability, or read-after-write order).
        let (info, ordering) = info::find_ordered(&hints, same_host, cfg.ordering)?;
        crate::env::check_ranks(&info.provider(), boot.size())?;
        let fabric = Fabric::open(&info)?;
        let domain = Domain::open(&fabric, &info)?;
        let atomics = domain.atomic_support();
        if cfg.atomics && !atomics.all() {
            return Err(Error::Unsupported {
                provider: info.provider(),
                what: format!(
                    "u64 atomics: fi_query_atomic lacks {}",
                    atomics.missing().join(", ")
                ),
                hint: "pick a provider with atomics (shm, sockets, tcp;ofi_rxm, verbs;ofi_rxm; \
                       see `fabkit info`), or run without atomics"
                    .into(),
            });
        }
        let depth = (cfg.window * 2).max(info.tx_size().min(4096)).max(256);
        let cq = CompletionQueue::open(&domain, depth)?;
        cq.set_busy_poll(cfg.busy_poll);
        let av = AddressVector::open(&domain)?;
        let ep = Endpoint::open(&domain, &cq, &av)?;
        let region = match &cfg.shared_region {
            Some(seg) => ep.register_shared(seg.clone())?,
            None => ep.register(cfg.region_len)?,
        };
        let staging = ep.register_staging(cfg.staging_len)?;

        let me = Card {
            provider: info.provider(),
            name: ep.name().to_vec(),
            region: region.remote(),
        };
        let cards = boot.allgather(&me.encode())?;
        let cards: Vec<Card> = cards
            .iter()
            .enumerate()
            .map(|(r, c)| Card::decode(c, r))
            .collect::<Result<_>>()?;
        if let Some((r, c)) = cards
            .iter()
            .enumerate()
            .find(|(_, c)| c.provider != me.provider)
        {
            return Err(Error::from(CoreError::Mismatch {
                what: "the provider".into(),
                detail: format!(
                    "rank {} uses `{}`, rank {r} uses `{}`",
                    boot.rank(),
                    me.provider,
                    c.provider
                ),
            }));
        }
        // Every card's address is checked before any is inserted, so that a
        // damaged card fails every rank alike, before any of them maps a
        // peer (shm maps a peer's region on insert, and one that is torn
        // down meanwhile by a rank that failed has crashed libfabric).
        for (r, c) in cards.iter().enumerate() {
            av.check_name(&c.name, Some(r))?;
        }
        let peers = cards
            .iter()
            .enumerate()
            .map(|(r, c)| {
                Ok(Peer {
                    addr: av.insert_from(&c.name, Some(r))?,
                    region: c.region,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let progress = match cfg.progress {
            ProgressMode::Thread => true,
            ProgressMode::Auto => info.data_progress() != Progress::Auto,
            ProgressMode::Off => false,
        }
        .then(|| ProgressThread::start(cq.inner.clone(), boot.rank()))
        .transpose()?;
        // Nobody may access a peer before it has inserted everyone.
        boot.barrier()?;
        Ok(Rank {
            progress,
            staging: std::mem::ManuallyDrop::new(Mutex::new(Some(staging))),
            region: std::mem::ManuallyDrop::new(region),
            peers,
            regions_first: info.mr_mode() & fabric_sys::FI_MR_ENDPOINT != 0,
            serve_while_posting: info.data_progress() != Progress::Auto,
            ep: std::mem::ManuallyDrop::new(ep),
            cq,
            _av: av,
            domain,
            _fabric: fabric,
            info,
            atomics,
            ordering,
            fences: FenceBook::new(cards.len()),
            rank: boot.rank(),
            cfg,
            failed: std::sync::OnceLock::new(),
            retired: Arc::new(Mutex::new(Vec::new())),
        })
    }

    /// Ends the job cleanly: waits until every rank is done with the others'
    /// regions, then closes. (Dropping without it is safe, but a peer still
    /// accessing this rank's region would then see errors.)
    pub fn finish(self, boot: &dyn Bootstrap) -> Result<()> {
        Ok(boot.barrier()?)
    }
}
