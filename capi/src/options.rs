//! A table's variant and transport: from `fabkit_dht_create`'s options,
//! else from the environment, else the MPI-DHT's default (lock-free over
//! an `MPI_Win_allocate` window).

use fabkit_dht::Variant;

use crate::boundary::text;
use crate::codes::fabkit_dht_options_t;

/// Where the table's operations go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// MPI one-sided operations on an `MPI_Win_allocate` window.
    Mpi,
    /// libfabric RMA and atomics to every rank.
    Fabric,
    /// Loads and stores to the ranks of this node (mapped shared memory),
    /// libfabric to the others.
    Shm,
}

/// The provider of `fabric` and `shm` when none is named: found on every
/// Linux host, across hosts too.
pub(crate) const DEFAULT_PROVIDER: &str = "tcp;ofi_rxm";

/// What one rank asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    pub(crate) variant: Variant,
    pub(crate) path: Path,
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
        let field = |f: fn(&fabkit_dht_options_t) -> *const std::ffi::c_char,
                     name: &str,
                     var: &str|
         -> Result<Option<(String, String)>, String> {
            let p = given.map_or(std::ptr::null(), f);
            // SAFETY: null or NUL-terminated (the contract).
            if let Some(t) = unsafe { text(p, name)? } {
                return Ok(Some((t.to_string(), format!("options->{name}"))));
            }
            match std::env::var(var) {
                Ok(v) if !v.is_empty() => Ok(Some((v, var.to_string()))),
                Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
                Err(std::env::VarError::NotUnicode(_)) => Err(format!("{var} is not UTF-8")),
            }
        };
        let variant = match field(|o| o.variant, "variant", "FABKIT_DHT_VARIANT")? {
            None => Variant::Lockfree,
            Some((v, from)) => match v.as_str() {
                "lockfree" => Variant::Lockfree,
                "fine" => Variant::Fine,
                "coarse" => Variant::Coarse,
                "chunked" => Variant::Chunked,
                _ => {
                    return Err(format!(
                        "{from} is {v:?}: give lockfree, fine, coarse or chunked"
                    ))
                }
            },
        };
        let path = match field(|o| o.transport, "transport", "FABKIT_DHT_TRANSPORT")? {
            None => Path::Mpi,
            Some((t, from)) => match t.as_str() {
                "mpi" => Path::Mpi,
                "fabric" => Path::Fabric,
                "shm" => Path::Shm,
                _ => return Err(format!("{from} is {t:?}: give mpi, fabric or shm")),
            },
        };
        let provider = field(|o| o.provider, "provider", "FABKIT_DHT_PROVIDER")?
            .map_or_else(|| DEFAULT_PROVIDER.to_string(), |(p, _)| p);
        let domain = field(|o| o.domain, "domain", "FABKIT_DHT_DOMAIN")?.map(|(d, _)| d);
        Ok(Options {
            variant,
            path,
            provider,
            domain,
        })
    }

    /// One line: the variant, the transport and (off MPI) the provider.
    pub(crate) fn describe(&self) -> String {
        let variant = match self.variant {
            Variant::Lockfree => "lockfree",
            Variant::Fine => "fine",
            Variant::Coarse => "coarse",
            Variant::Chunked => "chunked",
        };
        match self.path {
            Path::Mpi => format!("{variant} over mpi (MPI_Win_allocate)"),
            Path::Fabric | Path::Shm => format!(
                "{variant} over {} (provider {}{})",
                if self.path == Path::Fabric {
                    "fabric"
                } else {
                    "shm"
                },
                self.provider,
                self.domain
                    .as_deref()
                    .map_or(String::new(), |d| format!(", domain {d}"))
            ),
        }
    }
}
