//! A mailbox's set-up: the cards ranks exchange (endpoint names and
//! doorbell), the collective `establish`, and the check that a service
//! sees who sent a request (`FI_SOURCE`).

use super::*;

/// What a rank tells its peers: its two endpoints' names and its
/// doorbell's (empty: none).
fn card(service: &[u8], client: &[u8], bell: &str) -> Vec<u8> {
    let mut v = Vec::new();
    for part in [service, client] {
        v.extend_from_slice(&(part.len() as u32).to_le_bytes());
        v.extend_from_slice(part);
    }
    v.extend_from_slice(bell.as_bytes());
    v
}

/// A card's service and client names and doorbell name.
fn read_card(b: &[u8], rank: usize) -> Result<(&[u8], &[u8], &str)> {
    let bad = || {
        Error::from(CoreError::Bootstrap(format!(
            "rank {rank} sent a malformed mailbox card"
        )))
    };
    let mut rest = b;
    let mut part = || -> Result<&[u8]> {
        let n = rest
            .get(..4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")) as usize)
            .ok_or_else(bad)?;
        let (name, after) = rest
            .get(4..)
            .filter(|r| r.len() >= n)
            .map(|r| r.split_at(n))
            .ok_or_else(bad)?;
        rest = after;
        Ok(name)
    };
    let (service, client) = (part()?, part()?);
    let bell = std::str::from_utf8(rest).map_err(|_| bad())?;
    Ok((service, client, bell))
}

impl Mailbox {
    /// Opens the provider for tagged messages with their sources, two
    /// endpoints, and exchanges their names with every rank through `boot`;
    /// posts the service's request receives. Collective.
    pub fn establish(mut cfg: MailboxConfig, boot: &dyn Bootstrap) -> Result<Mailbox> {
        cfg.timeout = crate::env::scaled(cfg.timeout);
        if cfg.slots == 0 || cfg.max_msg == 0 {
            return Err(Error::from(CoreError::InvalidArgument(
                "a mailbox needs at least one request slot and messages of at least 1 B".into(),
            )));
        }
        let mut hints = Hints::new(cfg.provider.clone(), Caps::MESSAGES);
        hints.domain = cfg.domain.clone();
        let same_host = boot.same_host()?;
        let info = info::find(&hints, same_host)?;
        crate::env::check_ranks(&info.provider(), boot.size())?;
        let fabric = Fabric::open(&info)?;
        let domain = Domain::open(&fabric, &info)?;
        let depth = (cfg.slots * 2).max(256);
        let av = AddressVector::open(&domain)?;
        let scq = CompletionQueue::open_with_sources(&domain, depth)?;
        let ccq = CompletionQueue::open(&domain, depth)?;
        let sep = Endpoint::open(&domain, &scq, &av)?;
        let cep = Endpoint::open(&domain, &ccq, &av)?;
        // No wait object: an idle service sleeps on a doorbell its callers
        // ring, which reaches ranks of this host (as shm does).
        let bell = (!scq.can_block() && same_host)
            .then(Doorbell::create)
            .transpose()?;
        let bell_name = bell.as_ref().map_or("", |b| b.name());
        let cards = boot.allgather(&card(sep.name(), cep.name(), bell_name))?;
        let mut named = Vec::with_capacity(cards.len());
        for (r, c) in cards.iter().enumerate() {
            let (s, c, b) = read_card(c, r)?;
            av.check_name(s, Some(r))?;
            av.check_name(c, Some(r))?;
            named.push((s, c, b));
        }
        let mut own = bell;
        let bells = named
            .iter()
            .enumerate()
            .map(|(r, &(_, _, b))| match r == boot.rank() {
                true => Ok(own.take()),
                false if b.is_empty() => Ok(None),
                false => Doorbell::open(b).map(Some),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut peers = Vec::with_capacity(named.len());
        let mut members = HashMap::new();
        for (r, (s, c, _)) in named.into_iter().enumerate() {
            let p = Peer {
                service: av.insert_from(s, Some(r))?,
                client: av.insert_from(c, Some(r))?,
            };
            members.insert(p.client, r);
            peers.push(p);
        }
        let max = cfg.max_msg.min(info.max_msg_size());
        let inner = Arc::new(Inner {
            posted: Mutex::new(Vec::new()),
            spare: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
            service: Side {
                ep: ManuallyDrop::new(sep),
                cq: scq,
            },
            client: Side {
                ep: ManuallyDrop::new(cep),
                cq: ccq,
            },
            peers,
            members,
            _av: av,
            regions_first: info.mr_mode() & ffi::FI_MR_ENDPOINT != 0,
            domain,
            _fabric: fabric,
            info,
            rank: boot.rank(),
            max,
            woken: AtomicBool::new(false),
            active: Moment::default(),
            counts: Mutex::new(MailboxCounts::default()),
            cfg,
            bells,
        });
        {
            let mut posted = inner.posted.lock().unwrap();
            for _ in 0..inner.cfg.slots {
                let buf = inner.service.ep.register_local(inner.max)?;
                posted.push(Some(inner.post_request_recv(buf)?));
            }
        }
        let mb = Mailbox { inner };
        // Before anyone may send (the agreement below is the barrier every
        // rank waits in): the service's only request is this rank's own.
        let probed = mb.check_sources();
        let local = probed.as_ref().map(|()| &[][..]).map_err(|e| e.to_string());
        match fabkit_core::agree::agree(boot, local.as_ref().map_err(|e| e.as_str()).copied()) {
            Ok(_) => {}
            // Every rank fails alike: its own error if it had one, else
            // the first rank's that did.
            Err(Disagreed::Failed(why)) => {
                probed?;
                let (rank, msg) = &why[0];
                return Err(Error::from(CoreError::Bootstrap(format!(
                    "rank {rank} could not set up its mailbox: {msg}"
                ))));
            }
            Err(e) => return Err(Error::from(CoreError::Bootstrap(e.to_string()))),
        }
        // Every rank has mapped this one's doorbell: its name can go.
        if let Some(b) = &mb.inner.bells[mb.inner.rank] {
            b.unlink();
        }
        Ok(mb)
    }

    /// Sends this rank's service one request from its own client endpoint
    /// and checks that the service sees where it came from (`FI_SOURCE`):
    /// the only way the service tells members from strangers. `udp;ofi_rxd`
    /// (1.17) reports another address, so every request would be refused
    /// as a stranger's and every call would time out.
    fn check_sources(&self) -> Result<()> {
        const PROBE: &[u8] = b"fabkit mailbox: who sent this?";
        let i = &self.inner;
        let me = i.peer(i.rank)?;
        let seen = std::cell::Cell::new(None);
        let mut take = |from: Option<usize>, bytes: &[u8]| {
            if bytes == PROBE {
                seen.set(Some(from));
            }
        };
        let sent =
            i.send_progressing(&i.client, me.service, REQUEST, PROBE, i.rank, &mut || {
                self.serve(Duration::ZERO, &mut take).map(drop)
            })?;
        let deadline = Instant::now() + i.cfg.timeout;
        // Both sides progressed until the request is in and its send
        // complete: a provider that carries messages in software (`ofi_rxd`)
        // moves the send only when the client's side is progressed, and
        // one that completes a send only once its receiver has progressed
        // (`ofi_rxm`) needs the service's side.
        let client = &i.client.cq.inner;
        while (seen.get().is_none() || !client.settled(sent.t)) && Instant::now() < deadline {
            client.drive(Duration::ZERO);
            let left = deadline.saturating_duration_since(Instant::now());
            self.serve(left.min(Duration::from_millis(1)), &mut take)?;
        }
        let settled = i.settle(&i.client, sent, Instant::now(), OpKind::Send, i.rank);
        *i.counts.lock().unwrap() = MailboxCounts::default();
        let settled = match (seen.get(), settled) {
            (Some(_), Err(e)) => return Err(e),
            (_, s) => s,
        };
        match seen.get() {
            Some(Some(r)) if r == i.rank => Ok(()),
            Some(_) => Err(Error::Unsupported {
                provider: i.info.provider(),
                what: "messages whose sender the receiver can tell (FI_SOURCE gave another \
                       address for this rank's own request)"
                    .into(),
                hint: "the message path needs it: use shm, tcp;ofi_rxm or sockets, or the \
                       rma path"
                    .into(),
            }),
            None => Err(Error::from(CoreError::Bootstrap(format!(
                "rank {}: a request to its own mailbox did not arrive within {:?} (its send: {})",
                i.rank,
                i.cfg.timeout,
                settled.map_or_else(|e| e.to_string(), |()| "completed".into())
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_carries_both_names_and_the_bell_and_a_torn_one_is_refused() {
        let c = card(b"service-name", b"client", "fabkit.bell");
        let (s, k, b) = read_card(&c, 3).unwrap();
        assert_eq!(
            (s, k, b),
            (&b"service-name"[..], &b"client"[..], "fabkit.bell")
        );
        let none = card(b"s", b"c", "");
        assert_eq!(read_card(&none, 3).unwrap().2, "");
        assert!(read_card(&c[..2], 3).is_err());
        assert!(read_card(&c[..20], 3).is_err());
        let mut long = c.clone();
        long[..4].copy_from_slice(&1000u32.to_le_bytes());
        let e = read_card(&long, 3).unwrap_err();
        assert!(e.to_string().contains("rank 3"), "{e}");
    }
}
