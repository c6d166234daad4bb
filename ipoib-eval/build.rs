// The same commit stamp as the fabkit command (FABKIT_COMMIT), one source.
include!("../bench/build.rs");
