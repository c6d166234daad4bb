//! How a rank makes the tables it runs, for every command that runs the
//! DHT on ranks (`fabkit dht`, `fabkit surrogate`): through
//! [`fabkit_dht::open`], the one way to make a table from its
//! configuration, on the path the command line asks for (`--path`, or
//! `--shm` for memory), carried by libfabric or MPI.

use std::time::Duration;

use anyhow::{Context, Result};
use fabkit_core::bootstrap::Bootstrap;
use fabkit_dht::open::{open, Opened, Recipe};
use fabkit_dht::{Config, Path};

/// The path a row's operations took, as reports write it (`path`).
pub use fabkit_dht::path::Taken;

/// What a command asks of its tables' transport.
#[derive(Clone, Debug)]
pub struct Fabric<'a> {
    /// libfabric provider.
    pub provider: &'a str,
    /// Domain, interface or network (`-d`).
    pub domain: Option<&'a str>,
    /// The longest wait for one operation.
    pub timeout: Duration,
    /// Operations per batch: the window of the rank's endpoints.
    pub batch: usize,
    /// The path (`--path`; `--shm` is memory).
    pub path: Path,
}

/// The path `--path` and `--shm` ask for together; a pair that
/// contradicts itself is refused.
pub fn path_of(path: Option<Path>, shm: bool) -> Result<Path> {
    match (path, shm) {
        (None, false) => Ok(Path::Auto),
        (None | Some(Path::Memory), true) => Ok(Path::Memory),
        (Some(p), true) => Err(crate::exit::usage(format!(
            "--shm is the memory path and --path {} contradicts it: give one of them",
            p.name()
        ))),
        (Some(p), false) => Ok(p),
    }
}

/// Makes a rank's tables, one at a time, on one path.
pub struct Tables<'b> {
    recipe: Recipe<'b>,
    boot: &'b dyn Bootstrap,
    path: Path,
    what: String,
    #[cfg(feature = "mpi")]
    _nap: Option<NapRestore<'b>>,
}

impl std::fmt::Debug for Tables<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tables({}, path {})", self.what, self.path.name())
    }
}

impl<'b> Tables<'b> {
    /// Tables over libfabric.
    pub fn fabric(f: &Fabric<'_>, boot: &'b dyn Bootstrap) -> Tables<'b> {
        let mut recipe = Recipe::fabric(f.provider);
        recipe.domain = f.domain.map(str::to_string);
        recipe.timeout = f.timeout;
        recipe.window = f.batch;
        Tables {
            recipe,
            boot,
            path: f.path,
            what: format!("`{}`", f.provider),
            #[cfg(feature = "mpi")]
            _nap: None,
        }
    }

    /// Tables over MPI: windows of `kind` for one-sided operations,
    /// point-to-point for messages; `f` gives the timeout, window and path.
    #[cfg(feature = "mpi")]
    pub fn mpi(
        f: &Fabric<'_>,
        kind: fabkit_mpi::window::WindowKind,
        boot: &'b fabkit_mpi::MpiBootstrap,
    ) -> Tables<'b> {
        let mut t = Tables::fabric(f, boot);
        t.recipe.mpi = Some((fabkit_dht::open::MpiBoot::Borrowed(boot), kind));
        t.what = format!("MPI ({kind:?} windows)");
        // A rank done with a phase waits for the others in the bootstrap's
        // collectives, and under osc pt2pt their operations progress only
        // when it calls into MPI: with naps of up to 5 ms between its
        // tests, a straggler's operations took a nap each (1 000 ops/s). It
        // polls instead (a nap ceiling of zero: MPI_Test, a yield every
        // 256), as MPI's own waits do, where each rank has a core; with
        // more ranks than cores it naps at most 50 us, so as not to take a
        // straggler's core.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let nap = if boot.size() <= cores {
            Duration::ZERO
        } else {
            Duration::from_micros(50)
        };
        t._nap = Some(NapRestore(boot, boot.max_nap()));
        boot.set_max_nap(nap);
        t
    }

    /// The path asked for (`auto` unless `--path` or `--shm` said).
    pub fn asked(&self) -> fabkit_dht::Path {
        self.path
    }

    /// The table of `cfg`, on this command's path. Collective.
    pub fn open(&self, cfg: &Config) -> Result<Opened<'b>> {
        let mut cfg = *cfg;
        cfg.path = self.path;
        open(&cfg, &self.recipe, self.boot)
            .with_context(|| format!("setting up {} on the {} path", self.what, self.path.name()))
    }

    /// Frees `t` and ends its transport. Collective.
    pub fn close(&self, t: Opened<'_>) -> Result<()> {
        Ok(t.table.close(self.boot)?)
    }
}

/// What a row says carried its operations: the transport's name, and the
/// messenger's where the table sends requests.
pub fn carried_by<T: fabkit_dht::Transport, M: fabkit_dht::message::Messenger>(
    d: &fabkit_dht::Dht<T, M>,
) -> String {
    match d.messenger() {
        Some(m) => format!("{} + {}", d.transport().name(), m.name()),
        None => d.transport().name(),
    }
}

/// Puts the bootstrap's nap ceiling back when the tables are done, by
/// error or panic too.
#[cfg(feature = "mpi")]
struct NapRestore<'b>(&'b fabkit_mpi::MpiBootstrap, Duration);

#[cfg(feature = "mpi")]
impl Drop for NapRestore<'_> {
    fn drop(&mut self) {
        self.0.set_max_nap(self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_written_as_its_word() {
        for (p, word) in [
            (Taken::Memory, "memory"),
            (Taken::Rma, "rma"),
            (Taken::MemoryRma, "memory+rma"),
            (Taken::Message, "message"),
            (Taken::MemoryMessage, "memory+message"),
        ] {
            assert_eq!(serde_json::to_value(p).unwrap(), word);
            assert_eq!(serde_json::from_value::<Taken>(word.into()).unwrap(), p);
        }
    }

    #[test]
    fn shm_is_the_memory_path_and_another_path_beside_it_is_refused() {
        assert_eq!(path_of(None, false).unwrap(), Path::Auto);
        assert_eq!(path_of(None, true).unwrap(), Path::Memory);
        assert_eq!(path_of(Some(Path::Memory), true).unwrap(), Path::Memory);
        assert_eq!(path_of(Some(Path::Message), false).unwrap(), Path::Message);
        let e = path_of(Some(Path::Rma), true).unwrap_err();
        assert!(e.to_string().contains("--shm is the memory path"), "{e}");
        assert_eq!(crate::exit::exit_code(&e), 2);
    }

    #[test]
    fn each_path_reports_what_it_took_on_one_node() {
        use fabkit_core::bootstrap::ThreadGroup;
        let boots = ThreadGroup::members(2, Duration::from_secs(30));
        for (path, taken) in [
            (Path::Auto, Taken::Memory),
            (Path::Memory, Taken::Memory),
            (Path::Rma, Taken::Rma),
            (Path::Message, Taken::Message),
        ] {
            let f = Fabric {
                provider: "tcp;ofi_rxm",
                domain: None,
                timeout: Duration::from_secs(10),
                batch: 64,
                path,
            };
            std::thread::scope(|s| {
                for b in &boots {
                    let f = &f;
                    s.spawn(move || {
                        let tables = Tables::fabric(f, b);
                        let mut cfg = Config::new(fabkit_dht::Variant::Lockfree);
                        cfg.buckets = 64;
                        let t = tables.open(&cfg).unwrap();
                        assert_eq!(t.path, taken, "{path:?}");
                        tables.close(t).unwrap();
                    });
                }
            });
        }
    }
}
