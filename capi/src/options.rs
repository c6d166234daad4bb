//! A table's variant and transport: from `fabkit_dht_create`'s options,
//! else from the environment, else the MPI-DHT's default (lock-free over
//! an `MPI_Win_allocate` window).
#![allow(unsafe_code)]

use fabkit_dht::Variant;

use crate::boundary::text;
use crate::codes::fabkit_dht_options_t;

/// Where the table's operations go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// MPI one-sided operations on an `MPI_Win_allocate` window.
    Mpi,
    /// libfabric RMA and atomics to every rank.
    Fabric,
    /// Loads and stores to the ranks of this node (mapped shared memory),
    /// libfabric to the others.
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

/// The provider of `fabric` and `shm` when none is named: found on every
/// Linux host, across hosts too.
pub(crate) const DEFAULT_PROVIDER: &str = "tcp;ofi_rxm";

/// What one rank asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    pub(crate) variant: Variant,
    pub(crate) route: Route,
    pub(crate) provider: String,
    pub(crate) domain: Option<String>,
}

impl Options {
    /// The options given (any field null, or no struct at all), filled
    /// from `FABKIT_DHT_VARIANT`, `FABKIT_DHT_TRANSPORT`,
    /// `FABKIT_DHT_PROVIDER` and `FABKIT_DHT_DOMAIN`, then the defaults.
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
        let provider = field(|o| o.provider, "provider", "FABKIT_DHT_PROVIDER")?
            .map_or_else(|| DEFAULT_PROVIDER.to_string(), |(p, _)| p);
        let domain = field(|o| o.domain, "domain", "FABKIT_DHT_DOMAIN")?.map(|(d, _)| d);
        Ok(Options {
            variant,
            route,
            provider,
            domain,
        })
    }

    /// What every rank of a table must ask alike: the variant, the route
    /// and (off MPI) the provider. Domains may differ: each rank names
    /// its own NIC.
    pub(crate) fn shared(&self) -> String {
        match self.route {
            Route::Mpi => format!("{} over mpi", name_of(&VARIANTS, self.variant)),
            _ => format!(
                "{} over {} (provider {})",
                name_of(&VARIANTS, self.variant),
                name_of(&ROUTES, self.route),
                self.provider
            ),
        }
    }

    /// One line: the variant, the route and (off MPI) the provider and
    /// domain.
    pub(crate) fn describe(&self) -> String {
        match (self.route, &self.domain) {
            (Route::Mpi, _) => format!("{} (MPI_Win_allocate)", self.shared()),
            (_, None) => self.shared(),
            (_, Some(d)) => format!("{}, domain {d}", self.shared()),
        }
    }
}
