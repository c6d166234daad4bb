//! From axes to points: every combination of every experiment, each
//! value checked, the repetitions, and a seeded order. Pure.

use super::point::direction_str;
use super::{parse_offloads, Axes, Point, Policy, SweepFile, IPERF3, MAX_RUNS};
use crate::spec::{self, Proto, RecvPath, SendPath, SpecError};

fn nonempty(name: &str, len: usize) -> Result<(), SpecError> {
    if len == 0 {
        Err(SpecError(format!(
            "axis {name} is empty: give at least one value, or leave it out for its default"
        )))
    } else {
        Ok(())
    }
}

/// Parses a `CLIENT:SERVER` CPU placement (`any`: not pinned).
fn parse_placement(s: &str) -> Result<(Vec<usize>, Vec<usize>), SpecError> {
    if s == "any" {
        return Ok((Vec::new(), Vec::new()));
    }
    let Some((c, sv)) = s.split_once(':') else {
        return Err(SpecError(format!(
            "cpus `{s}`: give `any` or CLIENT:SERVER CPU lists such as 0:1 or 0-1:0"
        )));
    };
    let (c, sv) = (
        spec::parse_cpus("cpus (client)", c)?,
        spec::parse_cpus("cpus (server)", sv)?,
    );
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(bad) = c.iter().chain(&sv).find(|&&x| x >= n) {
        return Err(SpecError(format!(
            "cpus `{s}` names CPU {bad}, but this machine has {n} (0-{})",
            n - 1
        )));
    }
    Ok((c, sv))
}

impl SweepFile {
    /// Every run of the sweep, in the order it will run; each value is
    /// checked (the error names the axis and the value).
    pub fn expand(&self) -> Result<Vec<Point>, SpecError> {
        if !(self.seconds > 0.0 && self.seconds <= 3600.0) {
            let got = if self.seconds.abs() < 1e9 {
                self.seconds.to_string()
            } else {
                format!("{:e}", self.seconds)
            };
            return Err(SpecError(format!(
                "seconds must be more than 0 and at most 3600, got {got}"
            )));
        }
        if self.repetitions == 0 || self.repetitions > 1000 {
            return Err(SpecError(format!(
                "repetitions must be 1 to 1000, got {}",
                self.repetitions
            )));
        }
        let mut out = Vec::new();
        for (name, axes) in self.experiments()? {
            let points = self
                .expand_axes(&name, &axes, MAX_RUNS.saturating_sub(out.len()))
                .map_err(|e| {
                    if self.experiment.is_empty() {
                        e
                    } else {
                        SpecError(format!("experiment {name}: {}", e.0))
                    }
                })?;
            out.extend(points);
        }
        if self.shuffle {
            fabkit_core::rng::Rng::new(self.seed).shuffle(&mut out);
        }
        Ok(out)
    }

    /// The runs of one experiment, at most `room` of them.
    fn expand_axes(&self, name: &str, a: &Axes, room: usize) -> Result<Vec<Point>, SpecError> {
        // Every axis with its length, checked and multiplied once.
        let lens = [
            ("queues", a.queues.len()),
            ("policy", a.policy.len()),
            ("mtu", a.mtu.len()),
            ("offloads", a.offloads.len()),
            ("qdisc", a.qdisc.len()),
            ("txqueuelen", a.txqueuelen.len()),
            ("proto", a.proto.len()),
            ("len", a.len.len()),
            ("send", a.send.len()),
            ("recv", a.recv.len()),
            ("streams", a.streams.len()),
            ("rate", a.rate.len()),
            ("cpus", a.cpus.len()),
            ("gateway", a.gateway.len()),
            ("direction", a.direction.len()),
        ];
        for (name, n) in lens {
            nonempty(name, n)?;
        }
        let runs = lens
            .iter()
            .map(|(_, n)| *n)
            .chain([self.repetitions as usize])
            .try_fold(1usize, |n, k| n.checked_mul(k).filter(|&n| n <= room));
        let Some(_) = runs else {
            return Err(SpecError(format!(
                "the sweep has more than {MAX_RUNS} runs: trim an axis"
            )));
        };
        for q in &a.qdisc {
            if q.is_empty() || !q.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(SpecError(format!(
                    "qdisc `{}`: give default or a qdisc name such as pfifo_fast",
                    q.escape_default()
                )));
            }
        }
        for c in &a.cpus {
            if c.chars().any(|ch| ch.is_whitespace() || ch.is_control()) {
                return Err(SpecError(format!(
                    "cpus `{}`: write CPU lists without spaces, such as 0:1",
                    c.escape_default()
                )));
            }
        }
        for &q in &a.queues {
            if q == 0 || q > 64 {
                return Err(SpecError(format!("queues must be 1 to 64, got {q}")));
            }
        }
        for &m in &a.mtu {
            if !(68..=65535).contains(&m) {
                return Err(SpecError(format!("mtu must be 68 to 65535, got {m}")));
            }
        }
        let policies = a
            .policy
            .iter()
            .map(|p| p.parse::<Policy>())
            .collect::<Result<Vec<_>, _>>()?;
        let offloads = a
            .offloads
            .iter()
            .map(|o| parse_offloads(o))
            .collect::<Result<Vec<_>, _>>()?;
        let protos = a
            .proto
            .iter()
            .map(|p| match p.as_str() {
                "tcp" => Ok(Proto::Tcp),
                "udp" => Ok(Proto::Udp),
                other => Err(SpecError(format!("proto `{other}`: use tcp or udp"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        // `None`: iperf3's own.
        let sends = a
            .send
            .iter()
            .map(|s| match s.as_str() {
                IPERF3 => Ok(None),
                s => s.parse::<SendPath>().map(Some),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if sends.contains(&None) && self.seconds.fract() != 0.0 {
            return Err(SpecError(format!(
                "send iperf3 runs whole seconds: give seconds = {:.0} or so",
                self.seconds.ceil()
            )));
        }
        let recvs = a
            .recv
            .iter()
            .map(|s| s.parse::<RecvPath>())
            .collect::<Result<Vec<_>, _>>()?;
        let rates = a
            .rate
            .iter()
            .map(|r| spec::parse_rate(r))
            .collect::<Result<Vec<_>, _>>()?;
        let gateways = a
            .gateway
            .iter()
            .map(|g| match g.as_str() {
                "none" => Ok(None),
                m => m
                    .parse::<u32>()
                    .ok()
                    .filter(|m| (68..=65535).contains(m))
                    .map(Some)
                    .ok_or_else(|| {
                        SpecError(format!(
                            "gateway `{g}`: give none, or the far link's MTU (68 to 65535)"
                        ))
                    }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let directions = a
            .direction
            .iter()
            .map(|d| match d.as_str() {
                "forward" => Ok(spec::Direction::Forward),
                "reverse" => Ok(spec::Direction::Reverse),
                other => Err(SpecError(format!(
                    "direction `{other}`: use forward (host a sends) or reverse (host b sends)"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let placements = a
            .cpus
            .iter()
            .map(|c| parse_placement(c).map(|p| (c.clone(), p)))
            .collect::<Result<Vec<_>, _>>()?;
        // Every combination, the first axis varying slowest: combination n
        // is n written in the mixed radix of the axes' lengths.
        let dims: Vec<usize> = lens.iter().map(|(_, n)| *n).collect();
        let combos: usize = dims.iter().product();
        let mut out = Vec::new();
        for n in 0..combos {
            let mut ix = vec![0usize; dims.len()];
            let mut rest = n;
            for (slot, d) in ix.iter_mut().zip(&dims).rev() {
                *slot = rest % d;
                rest /= d;
            }
            let [queues, policy, mtu, off, qd, txq, proto, len, send, recv, streams, rate, cpus, gw, dir] =
                ix[..]
            else {
                unreachable!("one index per axis of `lens`")
            };
            let proto = protos[proto];
            let len = match (a.len[len].as_str(), proto) {
                ("default", Proto::Udp) => 1472,
                ("default", Proto::Tcp) => 128 * 1024,
                (l, _) => spec::parse_bytes("len", l)?,
            };
            let (cpus, (client_cpus, server_cpus)) = &placements[cpus];
            let iperf3 = sends[send].is_none();
            if iperf3 && recv > 0 {
                // iperf3 has one receive path: the first recv value stands
                // for all.
                continue;
            }
            let test = spec::TestSpec {
                proto,
                len,
                streams: a.streams[streams],
                amount: spec::Amount::Seconds(self.seconds),
                rate_bps: rates[rate],
                send: sends[send].unwrap_or(SendPath::Send),
                recv: if iperf3 { RecvPath::PLAIN } else { recvs[recv] },
                server_cpus: server_cpus.clone(),
                direction: directions[dir],
                ..spec::TestSpec::default()
            };
            test.validate()?;
            let policy = policies[policy];
            let gateway = gateways[gw];
            if policy != Policy::Hash && gateway.is_some() {
                return Err(SpecError(format!(
                    "policy {policy} with a gateway: the policy is set on the hosts' links, and \
                     the gateway picks the forwarded link's queue itself; use policy hash"
                )));
            }
            if policy == Policy::Rr
                && proto == Proto::Udp
                && (test.send != SendPath::Send || test.direction != spec::Direction::Forward)
            {
                return Err(SpecError(format!(
                    "policy rr with UDP needs send = \"send\" and direction = \"forward\" (only \
                     the client's unconnected sockets take a queue per datagram), got send \
                     {} and direction {}",
                    test.send,
                    direction_str(test.direction)
                )));
            }
            if iperf3 {
                iperf3_fits(&test, client_cpus, policy)?;
            }
            let qd = &a.qdisc[qd];
            for rep in 0..self.repetitions {
                out.push(Point {
                    experiment: name.to_string(),
                    cpus: cpus.clone(),
                    client_cpus: client_cpus.clone(),
                    gateway,
                    queues: a.queues[queues],
                    policy,
                    mtu: a.mtu[mtu],
                    offloads: offloads[off].clone(),
                    qdisc: (qd != "default").then(|| qd.clone()),
                    txqueuelen: a.txqueuelen[txq],
                    test: test.clone(),
                    rep,
                    iperf3,
                    on: None,
                });
            }
        }
        Ok(out)
    }
}

/// Refuses iperf3 points whose settings iperf3 cannot carry out.
fn iperf3_fits(
    test: &spec::TestSpec,
    client_cpus: &[usize],
    policy: Policy,
) -> Result<(), SpecError> {
    if client_cpus.len() > 1 || test.server_cpus.len() > 1 {
        return Err(SpecError(
            "send iperf3 pins each end to one CPU at most: give cpus such as 0:1".into(),
        ));
    }
    if test.len > crate::iperf3::MAX_LEN {
        return Err(SpecError(format!(
            "send iperf3 takes len up to {} bytes, got {}",
            crate::iperf3::MAX_LEN,
            test.len
        )));
    }
    if policy == Policy::Rr && test.proto == Proto::Udp {
        return Err(SpecError(
            "policy rr with send iperf3 and UDP: iperf3's UDP sockets are connected and keep \
             one queue; measure rr with send = \"send\""
                .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn file(axes: &str) -> SweepFile {
        SweepFile::parse(&format!("seconds = 1\n[axes]\n{axes}")).unwrap()
    }

    #[test]
    fn every_combination_times_the_repetitions() {
        let f = SweepFile::parse(
            "seconds = 2\nrepetitions = 3\n[axes]\nqueues = [1, 2, 4]\nproto = [\"tcp\", \"udp\"]\n",
        )
        .unwrap();
        let p = f.expand().unwrap();
        assert_eq!(p.len(), 3 * 2 * 3);
        let keys: HashSet<String> = p.iter().map(Point::key).collect();
        assert_eq!(keys.len(), p.len(), "keys name runs uniquely");
        assert!(p
            .iter()
            .any(|x| x.queues == 4 && x.test.proto == Proto::Udp && x.rep == 2));
        // Defaults: UDP messages of 1472 B, TCP of 128 KiB.
        assert!(p
            .iter()
            .filter(|x| x.test.proto == Proto::Udp)
            .all(|x| x.test.len == 1472));
        assert!(p
            .iter()
            .filter(|x| x.test.proto == Proto::Tcp)
            .all(|x| x.test.len == 128 * 1024));
        assert_eq!(f.estimate_s(p.len(), 1.0), 18.0 * 3.0);
    }

    #[test]
    fn experiments_take_the_common_axes_and_override_them() {
        let f = SweepFile::parse(
            "seconds = 1\n[axes]\nqueues = [4]\nproto = [\"udp\"]\n\
             [[experiment]]\nname = \"queues\"\nqueues = [1, 2, 4, 8]\n\
             [[experiment]]\nname = \"policy\"\npolicy = [\"hash\", \"xps\", \"rr\"]\n\
             cpus = [\"any\", \"0:1\"]\n",
        )
        .unwrap();
        let p = f.expand().unwrap();
        assert_eq!(p.len(), 4 + 3 * 2);
        let q: Vec<&Point> = p.iter().filter(|x| x.experiment == "queues").collect();
        assert_eq!(q.iter().map(|x| x.queues).collect::<Vec<_>>(), [1, 2, 4, 8]);
        assert!(p.iter().all(|x| x.test.proto == Proto::Udp), "common axis");
        let pol: Vec<&Point> = p.iter().filter(|x| x.experiment == "policy").collect();
        assert!(pol.iter().all(|x| x.queues == 4), "common axis kept");
        assert!(pol
            .iter()
            .any(|x| x.policy == Policy::Rr && x.client_cpus == [0] && x.test.server_cpus == [1]));
        assert!(pol
            .iter()
            .any(|x| x.cpus == "any" && x.client_cpus.is_empty()));
        // Experiments name their points: the same settings in two
        // experiments are two runs.
        let keys: HashSet<String> = p.iter().map(Point::key).collect();
        assert_eq!(keys.len(), p.len());
    }

    #[test]
    fn iperf3_points_are_one_per_receive_axis_and_checked() {
        let f = file(
            "proto = [\"udp\"]\nsend = [\"send\", \"iperf3\"]\nrecv = [\"recv\", \"mmsg:8\"]\n",
        );
        let p = f.expand().unwrap();
        // Two of ours (one per recv), one iperf3 for both recv values.
        assert_eq!(p.len(), 3);
        let i: Vec<&Point> = p.iter().filter(|x| x.iperf3).collect();
        assert_eq!(i.len(), 1);
        assert!(
            i[0].key().contains("send=iperf3 recv=iperf3"),
            "{}",
            i[0].key()
        );
        let bad = |t: &str, want: &str| {
            let e = SweepFile::parse(t).unwrap().expand().unwrap_err().0;
            assert!(e.contains(want), "{t}: {e}");
        };
        bad(
            "seconds = 1.5\n[axes]\nsend = [\"iperf3\"]\n",
            "whole seconds",
        );
        bad(
            "seconds = 1\n[axes]\nsend = [\"iperf3\"]\ncpus = [\"0,1:1\"]\n",
            "one CPU",
        );
        bad(
            "seconds = 1\n[axes]\nsend = [\"iperf3\"]\nproto = [\"udp\"]\npolicy = [\"rr\"]\n",
            "connected",
        );
        bad(
            "seconds = 1\n[axes]\nsend = [\"iperf3\"]\nlen = [\"2M\"]\n",
            "len up to",
        );
    }

    #[test]
    fn the_shuffle_is_a_seeded_permutation() {
        let base = file("queues = [1, 2, 3, 4, 5, 6, 7, 8]\nmtu = [1500, 9000]");
        let plain: Vec<String> = base.expand().unwrap().iter().map(Point::key).collect();
        let mut f = base.clone();
        f.shuffle = true;
        f.seed = 7;
        let a: Vec<String> = f.expand().unwrap().iter().map(Point::key).collect();
        let b: Vec<String> = f.expand().unwrap().iter().map(Point::key).collect();
        assert_eq!(a, b, "same seed, same order");
        assert_ne!(a, plain, "shuffled");
        let (mut x, mut y) = (a.clone(), plain.clone());
        x.sort();
        y.sort();
        assert_eq!(x, y, "a permutation: nothing lost or doubled");
        f.seed = 8;
        let c: Vec<String> = f.expand().unwrap().iter().map(Point::key).collect();
        assert_ne!(a, c);
    }

    #[test]
    fn bad_files_and_values_are_named() {
        for (text, needle) in [
            ("[axes]\nqueues = []", "axis queues is empty"),
            ("[axes]\nqueues = [0]", "queues must be 1 to 64"),
            ("[axes]\nmtu = [70000]", "mtu must be"),
            ("[axes]\ncpus = [\"0\"]", "cpus `0`"),
            ("[axes]\ngateway = [\"9\"]", "gateway `9`"),
            ("[axes]\ngateway = [\"1500\"]\npolicy = [\"xps\"]", "with a gateway"),
            (
                "[axes]\nproto = [\"udp\"]\npolicy = [\"rr\"]\nsend = [\"gso:8\"]",
                "policy rr with UDP needs",
            ),
            (
                "[axes]\nproto = [\"udp\"]\npolicy = [\"rr\"]\ndirection = [\"reverse\"]",
                "policy rr with UDP needs",
            ),
            ("[axes]\nqdisc = [\"pfifo\\nx\"]", "qdisc `pfifo\\nx`"),
            ("[axes]\noffloads = [\"Bogus Name=off\"]", "offloads"),
            ("[axes]\ncpus = [\"0:99\"]", "names CPU 99"),
            ("[axes]\ncpus = [\" 0:1\"]", "without spaces"),
            ("[axes]\nbogus = [1]", "[axes]: unknown field"),
            ("[axes]\ndirection = [\"bidir\"]", "direction `bidir`"),
            ("[axes]\ncpus = [\"0:x\"]", "cpus (server)"),
            ("[[experiment]]\nqueues = [1]", "experiment 1: give it a name"),
            (
                "[[experiment]]\nname = \"a\"\n[[experiment]]\nname = \"a\"",
                "experiment a is named twice",
            ),
            ("[[experiment]]\nname = \"x\"\nmtu = [1]", "experiment x: mtu must be"),
            ("[[experiment]]\nname = \"x y\"", "give it a name"),
            ("[axes]\npolicy = [\"fastest\"]", "policy `fastest`"),
            ("[axes]\nproto = [\"sctp\"]", "proto `sctp`"),
            ("[axes]\noffloads = [\"tso\"]", "offloads `tso`"),
            ("[axes]\nsend = [\"gso:0\"]", "gso"),
            ("[axes]\nlen = [\"1e300\"]", "len"),
            ("[axes]\nrate = [\"-1\"]", "rate"),
            ("[axes]\nbogus = [1]", "unknown field"),
            ("seconds = 0", "seconds must be"),
            ("seconds = 1e300", "seconds must be"),
            ("repetitions = 0", "repetitions must be"),
            ("seconds = \"x\"", "sweep file"),
            (
                "[axes]\nqueues = [1,2,3,4,5,6,7,8,9,10,11]\nmtu = [1500,1501,1502,1503,1504,1505,1506,1507,1508,1509]\nstreams = [1,2,3,4,5,6,7,8,9,10]\ntxqueuelen = [1,2,3,4,5,6,7,8,9,10]\nrate = [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\"]",
                "more than 100000 runs",
            ),
        ] {
            let e = SweepFile::parse(text)
                .and_then(|f| f.expand())
                .map(|_| ())
                .expect_err(text)
                .to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
}
