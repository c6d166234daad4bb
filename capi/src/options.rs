//! A table's variant, transport and path: from `fabkit_dht_create`'s
//! options, else from the environment, else the defaults (lock-free, MPI,
//! and the `auto` path: shared memory on one node; across nodes MPI
//! point-to-point requests where MPI gives `MPI_THREAD_MULTIPLE`, else an
//! `MPI_Win_allocate` window, as the MPI-DHT's default build makes).
#![allow(unsafe_code)]

use fabkit_dht::{Path, Variant};

use crate::boundary::text;
use crate::codes::fabkit_dht_options_t;

/// How the ranks meet and what carries their operations
/// (`FABKIT_DHT_TRANSPORT`); the path says how operations travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// MPI: windows (`MPI_Win_allocate`) for one-sided operations,
    /// point-to-point for requests.
    Mpi,
    /// libfabric.
    Fabric,
    /// libfabric, on the memory path: loads and stores to the ranks of this
    /// node (mapped shared memory), RMA to the others (the spelling of
    /// `fabric` with `FABKIT_DHT_PATH=memory`).
    Shm,
}

/// The variants by the names C gives them.
const VARIANTS: [(&str, Variant); 4] = [
    ("lockfree", Variant::Lockfree),
    ("fine", Variant::Fine),
    ("coarse", Variant::Coarse),
    ("chunked", Variant::Chunked),
];

/// The routes by the names C gives them.
const ROUTES: [(&str, Route); 3] = [
    ("mpi", Route::Mpi),
    ("fabric", Route::Fabric),
    ("shm", Route::Shm),
];

/// The value `given` names in `table` (`default` if none is given), or
/// what to give instead.
fn pick<T: Copy>(
    given: Option<(String, String)>,
    table: &[(&str, T)],
    default: T,
) -> Result<T, String> {
    let Some((v, from)) = given else {
        return Ok(default);
    };
    table
        .iter()
        .find(|(n, _)| *n == v)
        .map(|(_, x)| *x)
        .ok_or_else(|| {
            let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
            format!("{from} is {v:?}: give one of {}", names.join(", "))
        })
}

/// The name `table` gives `x`.
fn name_of<T: PartialEq + Copy>(table: &[(&'static str, T)], x: T) -> &'static str {
    table.iter().find(|(_, v)| *v == x).map_or("?", |(n, _)| n)
}

/// The paths by the names C gives them.
const PATHS: [(&str, Path); 4] = [
    ("auto", Path::Auto),
    ("memory", Path::Memory),
    ("rma", Path::Rma),
    ("message", Path::Message),
];

/// The provider of `fabric` and `shm` when none is named: found on every
/// Linux host, across hosts too.
pub(crate) const DEFAULT_PROVIDER: &str = "tcp;ofi_rxm";

/// What one rank asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    pub(crate) variant: Variant,
    pub(crate) route: Route,
    pub(crate) path: Path,
    pub(crate) provider: String,
    pub(crate) domain: Option<String>,
}

impl Options {
    /// The options given (any field null, or no struct at all), filled
    /// from `FABKIT_DHT_VARIANT`, `FABKIT_DHT_TRANSPORT`,
    /// `FABKIT_DHT_PROVIDER` and `FABKIT_DHT_DOMAIN`, then the defaults;
    /// the path from `FABKIT_DHT_PATH` (the options struct has no field for
    /// it, so that programs built against an older header keep working).
    ///
    /// # Safety
    ///
    /// `given` is null or points to options whose non-null fields are
    /// NUL-terminated strings.
    pub(crate) unsafe fn resolve(given: *const fabkit_dht_options_t) -> Result<Options, String> {
        // SAFETY: null or valid (the contract).
        let given = unsafe { given.as_ref() };
        // A field's value and where it came from, for errors.
        let field = |f: fn(&fabkit_dht_options_t) -> *const std::ffi::c_char,
                     name: &str,
                     var: &str|
         -> Result<Option<(String, String)>, String> {
            let p = given.map_or(std::ptr::null(), f);
            // SAFETY: null or NUL-terminated (the contract).
            if let Some(t) = unsafe { text(p, &format!("options->{name}"))? } {
                return Ok(Some((t.to_string(), format!("options->{name}"))));
            }
            match std::env::var(var) {
                Ok(v) if !v.is_empty() => Ok(Some((v, var.to_string()))),
                Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
                Err(std::env::VarError::NotUnicode(_)) => Err(format!("{var} is not UTF-8")),
            }
        };
        let variant = pick(
            field(|o| o.variant, "variant", "FABKIT_DHT_VARIANT")?,
            &VARIANTS,
            Variant::Lockfree,
        )?;
        let route = pick(
            field(|o| o.transport, "transport", "FABKIT_DHT_TRANSPORT")?,
            &ROUTES,
            Route::Mpi,
        )?;
        let path = match std::env::var("FABKIT_DHT_PATH") {
            Ok(v) if !v.is_empty() => Some(pick(
                Some((v, "FABKIT_DHT_PATH".into())),
                &PATHS,
                Path::Auto,
            )?),
            Ok(_) | Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err("FABKIT_DHT_PATH is not UTF-8".into())
            }
        };
        // `shm` is the memory path's old spelling: another path contradicts it.
        let path = match (route, path) {
            (Route::Shm, None | Some(Path::Memory)) => Path::Memory,
            (Route::Shm, Some(p)) => {
                return Err(format!(
                    "FABKIT_DHT_TRANSPORT=shm is the memory path, and FABKIT_DHT_PATH={} \
                     contradicts it: give FABKIT_DHT_TRANSPORT=fabric with FABKIT_DHT_PATH={0}, \
                     or leave FABKIT_DHT_PATH unset",
                    p.name()
                ))
            }
            (_, p) => p.unwrap_or_default(),
        };
        let provider = field(|o| o.provider, "provider", "FABKIT_DHT_PROVIDER")?
            .map_or_else(|| DEFAULT_PROVIDER.to_string(), |(p, _)| p);
        let domain = field(|o| o.domain, "domain", "FABKIT_DHT_DOMAIN")?.map(|(d, _)| d);
        Ok(Options {
            variant,
            route,
            path,
            provider,
            domain,
        })
    }

    /// What every rank of a table must ask alike: the variant, the route,
    /// the path and (off MPI) the provider. Domains may differ: each rank
    /// names its own NIC.
    pub(crate) fn shared(&self) -> String {
        let path = match (self.route, self.path) {
            // shm is the memory path by name.
            (Route::Shm, _) | (_, Path::Auto) => String::new(),
            (_, p) => format!(", path {}", p.name()),
        };
        match self.route {
            Route::Mpi => format!("{} over mpi{path}", name_of(&VARIANTS, self.variant)),
            _ => format!(
                "{} over {} (provider {}){path}",
                name_of(&VARIANTS, self.variant),
                name_of(&ROUTES, self.route),
                self.provider
            ),
        }
    }

    /// Whether this table sends atomics on MPI windows (Open MPI 4.1's osc
    /// rdma crashes in them).
    fn atomics_on_windows(&self, path: fabkit_dht::path::Taken) -> bool {
        self.route == Route::Mpi
            && path == fabkit_dht::path::Taken::Rma
            && self.variant.needs_atomics()
    }

    /// Whether osc rdma may serve this table's windows though the job does
    /// not name it: no component list (`OMPI_MCA_osc` unset; an MCA
    /// parameter file may still set one), or a list of exclusions (`^...`)
    /// that does not exclude it. Open MPI picks among the allowed
    /// components by priority, and fabkit cannot see which it picked.
    fn osc_at_risk(&self, path: fabkit_dht::path::Taken) -> bool {
        self.atomics_on_windows(path)
            && match std::env::var("OMPI_MCA_osc") {
                Err(_) => true,
                Ok(list) => match list.trim().strip_prefix('^') {
                    Some(excluded) => !excluded.split(',').any(|c| c.trim() == "rdma"),
                    None => false,
                },
            }
    }

    /// Why this table cannot run: it would send atomics on MPI windows,
    /// and the job's component list allows osc rdma (which crashes in them
    /// in Open MPI 4.1, and which Open MPI prefers by priority wherever it
    /// is allowed).
    pub(crate) fn osc_refused(&self, path: fabkit_dht::path::Taken) -> Option<String> {
        let named = std::env::var("OMPI_MCA_osc").ok()?;
        let allows_rdma =
            !named.trim().starts_with('^') && named.split(',').any(|c| c.trim() == "rdma");
        (self.atomics_on_windows(path) && allows_rdma).then(|| {
            format!(
                "the {} variant sends atomics on MPI windows, and OMPI_MCA_osc={named} allows \
                 osc rdma, which crashes in them (Open MPI 4.1): use --mca osc sm,pt2pt (or \
                 ucx), or the lockfree variant",
                name_of(&VARIANTS, self.variant)
            )
        })
    }

    /// One line: the variant, the route, (off MPI) the provider and
    /// domain, and the path the table took and why.
    pub(crate) fn describe(&self, path: fabkit_dht::path::Taken, why: &str) -> String {
        let variant = name_of(&VARIANTS, self.variant);
        let window = if path == fabkit_dht::path::Taken::Rma {
            " (MPI_Win_allocate)"
        } else {
            ""
        };
        let mut took = format!("path {} ({}: {why})", path.name(), self.path.name());
        if self.osc_at_risk(path) {
            took += "; Open MPI's default one-sided component (osc rdma, in 4.1) crashes this \
                     variant's atomics: run with --mca osc sm,pt2pt (or ucx)";
        }
        match (self.route, &self.domain) {
            (Route::Mpi, _) => format!("{variant} over mpi{window}, {took}"),
            (route, d) => format!(
                "{variant} over {} (provider {}{}), {took}",
                name_of(&ROUTES, route),
                self.provider,
                d.as_ref()
                    .map_or(String::new(), |d| format!(", domain {d}"))
            ),
        }
    }
}
