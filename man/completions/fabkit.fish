# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_fabkit_global_optspecs
    string join \n h/help V/version
end

function __fish_fabkit_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_fabkit_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_fabkit_using_subcommand
    set -l cmd (__fish_fabkit_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c fabkit -n "__fish_fabkit_needs_command" -s h -l help -d 'Print help'
complete -c fabkit -n "__fish_fabkit_needs_command" -s V -l version -d 'Print version'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "info" -d 'Show the libfabric version, every provider with what it supports, and RDMA devices (like fi_info + ibv_devinfo, but readable)'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "check" -d 'Check RMA read/write and every u64 atomic between ranks, byte for byte and value for value, then race all ranks on shared words'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "perf" -d 'Measure latency, bandwidth and message rate of RMA writes, reads and u64 atomics between two ranks, by size (like fi_rma_bw, fi_rma_pingpong, ib_write_bw, osu_put_latency)'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "mpi-perf" -d 'The same measurements through MPI one-sided RMA (MPI_Put, MPI_Get, MPI_Compare_and_swap, MPI_Fetch_and_op), with a chosen synchronisation (lock-all + flush, lock/unlock, fence, PSCW) and window kind (MPI_Win_allocate or MPI_Win_create). Run under mpirun with 2+ ranks; the output matches `fabkit perf`, so the two can be compared'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "plot" -d 'Draw JSON results as SVG charts and/or a markdown table: perf and mpi-perf against size (rate, bandwidth or latency; MPI dashed), dht against ranks or a soak over time, a surrogate\'s speed-up'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "dht" -d 'Benchmark the distributed hash table as an application\'s cache: the MPI-DHT paper\'s write, read and mixed phases (`-w paper`) and YCSB\'s workloads (`-w load-a,a,b,c,d,f`), per variant (coarse, fine, lockfree, chunked), with Redis beside it in the same run when redis-server is installed: throughput (median and spread of --reps), latency percentiles, CPU time and bytes moved per operation, the DHT\'s counters, and the hot-key check'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "model" -d 'Predict the DHT\'s throughput on a fabric from what the fabric does (`fabkit perf -b --json` files, or a NIC\'s packet rate) and what the DHT costs the host (a `fabkit dht --json` run on one node), per variant, workload and phase: the fabric\'s limit, the cores\' limit, and which binds; beside a measured run if one is given'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "surrogate" -d 'The DHT as the surrogate-model cache of a POET-like reactive-transport simulation (a grid carried by a flow, an iterative chemistry solver per cell and time step, inputs rounded to significant digits as the key): runtime and speed-up against the run without the cache, hit rate, checksum mismatches, the break-even solver cost and the error the rounding introduces, per variant, rounding and solver cost'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "demo" -d 'The embedded default job: `info`, `check` with 4 in-process ranks on every provider here that offers RMA and atomics, then a short DHT benchmark (every variant, the paper\'s workload and YCSB A, Redis beside it when installed) on the fastest same-node path: 2 in-process ranks sharing their regions through the same-node shortcut'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "launch" -d 'Start a fabkit command as ranks in processes on this machine, one per network namespace (each a host of its own) or -n plain processes, meeting through a shared directory (or, with --mpi, under mpirun): `fabkit launch --netns ipoib-a,ipoib-b -- fabkit check -p \'tcp;ofi_rxm\'`'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "clean" -d 'Remove the shared-memory segments killed ranks left in /dev/shm: fabkit\'s whose process has exited and the libfabric shm provider\'s that no process has mapped, this user\'s only. Says what it removed'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "intrude" -d 'Try to read and write a running job\'s ranks from outside it, as an attacker on the same network would: find them by scanning, then guess keys for RMA and forge messages. Exit 1 if anything worked'
complete -c fabkit -n "__fish_fabkit_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c fabkit -n "__fish_fabkit_using_subcommand info" -s p -l provider -d 'Only this provider' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand info" -l json -d 'Print JSON instead of a table'
complete -c fabkit -n "__fish_fabkit_using_subcommand info" -s h -l help -d 'Print help'
complete -c fabkit -n "__fish_fabkit_using_subcommand check" -s p -l provider -d 'libfabric provider; repeat to check several. See `fabkit info`' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand check" -s d -l domain -d 'Domain: interface (lo, eth0) for socket providers, device (mlx5_0) for verbs, or a network the ranks share (10.77.1.0/24: the interface with an address in it). Default: chosen, `lo` when all ranks share a host' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand check" -s n -l ranks -d 'In-process ranks (ignored under mpirun/srun, where each process is one)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand check" -l timeout -d 'Seconds to wait for any one operation or peer before giving up' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand check" -l json -d 'Also write the full per-rank report as JSON to FILE (`-` for stdout)' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand check" -l mpi -d 'Check MPI one-sided RMA (MPI_Put/Get/Compare_and_swap/Fetch_and_op on a window of this kind, lock_all + flush) instead of libfabric. Under mpirun only' -r -f -a "allocate\t'MPI_Win_allocate (on one node Open MPI\'s osc sm maps shared memory)'
create\t'MPI_Win_create over MPI_Alloc_mem (goes through the BTL in Open MPI)'"
complete -c fabkit -n "__fish_fabkit_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -s p -l provider -d 'libfabric provider (see `fabkit info`)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -s d -l domain -d 'Domain: interface or device, or a network the ranks share (10.77.1.0/24). Default: chosen, `lo` on one host' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -s o -l op -d 'Operation' -r -f -a "write\t'RMA write (fi_write)'
read\t'RMA read (fi_read)'
cas\t'u64 compare-and-swap (fi_compare_atomic FI_CSWAP)'
fadd\t'u64 fetch-and-add (fi_fetch_atomic FI_SUM)'
send\t'Two-sided messages (fi_send/fi_recv): pingpong for lat, a window of sends and one acknowledgement for bw. `perf` only: MPI two-sided is what osu_latency and osu_bw measure'"
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -l pattern -d 'Latency (one in flight) or bandwidth/message rate (a window in flight)' -r -f -a "lat\t'One operation in flight: usec/xfer is the mean, min/p50/p99/max time operations one by one. For send: pingpong, half the round trip'
bw\t'A window of operations in flight: bandwidth and message rate'"
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -s s -l size -d 'One transfer size in bytes (atomics are always 8 B), at most 1 GiB' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -l sizes -d 'Comma-separated sizes, e.g. 184,189 (the DHT\'s records)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -s n -l iters -d 'Iterations per size (timed transfers per thread), at most 10^9 [default: 10000]' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -s t -l duration -d 'Run each size for about this many seconds instead of -n iterations (calibrated on short runs first), at most a day' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -l warmup -d 'Untimed transfers before each size' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -s w -l window -d 'Operations in flight for --pattern bw' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -l timeout -d 'Seconds to wait for any one operation before giving up' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -l json -d 'Write results as JSON to FILE (`-` for stdout)' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -l csv -d 'Write results as CSV to FILE (`-` for stdout)' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -s T -l threads -d 'Initiating threads per rank (the multithreaded RMA question)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -l completion -d 'The completion writes wait for: `transmit` (fi_rma_bw\'s, the provider\'s default) or `delivery` (FI_DELIVERY_COMPLETE, or the rank\'s other mechanism for it: what the DHT\'s stores ask for, so the bound they are compared with)' -r -f -a "transmit\t'Transmit-complete: the write no longer needs the local buffer'
delivery\t'Delivery-complete: the bytes are visible at the target'"
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -s a -l all -d 'Sweep powers of two from 8 B to 4 MiB'
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -s b -l bidir -d 'Bidirectional: both ranks initiate at once; results are summed'
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -l ep-per-thread -d 'With -T: give each thread its own endpoint (and peer endpoint) instead of sharing one'
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -l busy-poll -d 'Busy-poll completion queues, as fabtests and perftest do, instead of spinning briefly and then blocking. Faster on idle cores; it starves the peer when ranks share cores'
complete -c fabkit -n "__fish_fabkit_using_subcommand perf" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -l pattern -d 'Latency (one in flight) or bandwidth/message rate (a window in flight)' -r -f -a "lat\t'One operation in flight: usec/xfer is the mean, min/p50/p99/max time operations one by one. For send: pingpong, half the round trip'
bw\t'A window of operations in flight: bandwidth and message rate'"
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -s s -l size -d 'One transfer size in bytes (atomics are always 8 B), at most 1 GiB' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -l sizes -d 'Comma-separated sizes, e.g. 184,189 (the DHT\'s records)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -l warmup -d 'Untimed transfers before each size' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -s w -l window -d 'Operations in flight for --pattern bw' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -l timeout -d 'Seconds to wait for any one operation before giving up' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -l json -d 'Write results as JSON to FILE (`-` for stdout)' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -l csv -d 'Write results as CSV to FILE (`-` for stdout)' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -l sync -d 'Synchronisation of each window of operations' -r -f -a "lock-all\t'MPI_Win_lock_all once, MPI_Win_flush per window of operations'
lock\t'MPI_Win_lock(SHARED)/unlock around each window of operations'
lock-exclusive\t'MPI_Win_lock(EXCLUSIVE)/unlock around each window of operations'
fence\t'MPI_Win_fence after each window (every rank takes part)'
pscw\t'Post-start-complete-wait per window (the target takes part)'"
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -l win -d 'Window memory: MPI_Win_allocate or MPI_Win_create' -r -f -a "allocate\t'MPI_Win_allocate (on one node Open MPI\'s osc sm maps shared memory)'
create\t'MPI_Win_create over MPI_Alloc_mem (goes through the BTL in Open MPI)'"
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -l osc -d 'Open MPI one-sided components to allow (sets OMPI_MCA_osc unless it is set already). Debian\'s default, osc rdma, crashes in MPI_Compare_and_swap, and its config disables pt2pt' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -s o -l op -d 'Operation' -r -f -a "write\t'MPI_Put'
read\t'MPI_Get'
cas\t'u64 MPI_Compare_and_swap'
fadd\t'u64 MPI_Fetch_and_op with MPI_SUM'"
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -s n -l iters -d 'Timed transfers per size, at most 10^9 [default: as many as fill -t 1, calibrated]' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -s t -l duration -d 'Run each size for about this many seconds (calibrated on short runs first), at most a day [default: 1 unless -n is given]' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -s a -l all -d 'Sweep powers of two from 8 B to 4 MiB'
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -s b -l bidir -d 'Bidirectional: both ranks initiate at once; results are summed'
complete -c fabkit -n "__fish_fabkit_using_subcommand mpi-perf" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabkit -n "__fish_fabkit_using_subcommand plot" -s m -l metric -d 'What to plot' -r -f -a "rate\t'Millions of transfers per second'
bandwidth\t'Megabytes per second'
latency\t'Median latency, microseconds (latency runs)'"
complete -c fabkit -n "__fish_fabkit_using_subcommand plot" -l title -d 'Chart title' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand plot" -s o -l output -d 'Output SVG file (`-`: standard output); for a surrogate report, the folder its charts go to (made if missing)' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand plot" -l markdown -d 'Also write a markdown table of every point to FILE (`-`: standard output)' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand plot" -l workload -d 'dht reports: only the runs of this workload (paper, load-a, a, ...)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand plot" -l phase -d 'dht reports: only the runs of this phase (write, read, mixed, load, run)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand plot" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -s p -l provider -d 'libfabric provider (see `fabkit info`)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -s d -l domain -d 'Domain: interface (eth0) or device (mlx5_0), or a network the ranks share (10.77.1.0/24). Default: chosen, `lo` when all ranks share a host' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -s n -l ranks -d 'In-process ranks (ignored under mpirun or fabkit launch, where each process is one)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -s v -l variant -d 'Which variant(s)' -r -f -a "all\t'All four, one after the other'
coarse\t'Coarse-grained region lock'
fine\t'Per-bucket lock words'
lockfree\t'Checksums, no locks'
chunked\t'Chunked linear probing'"
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -s w -l workload -d 'Workloads, comma-separated: paper (the MPI-DHT paper\'s write, read and mixed phases), load-a (YCSB: 100 % inserts), a (50 % reads, 50 % updates), b (95/5), c (100 % reads), d (95 % reads, 5 % inserts, latest), f (50 % reads, 50 % read-modify-writes)' -r -f -a "paper\t'The MPI-DHT paper\'s: write, read back (hits and misses), mixed'
load-a\t'YCSB\'s load phase alone, timed'
a\t'YCSB A, update heavy: 50 % reads, 50 % updates'
b\t'YCSB B, read mostly: 95 % reads, 5 % updates'
c\t'YCSB C, read only'
d\t'YCSB D, read latest: 95 % reads, 5 % inserts'
f\t'YCSB F, read-modify-write: 50 % reads, 50 % read-modify-writes'"
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l distribution -d 'Key distribution: uniform, zipf (paper: plain zipfian over --zipf-range; YCSB: scrambled zipfian over the records) or latest. Default: uniform for paper, zipf for YCSB, latest for d' -r -f -a "uniform\t'Every key equally likely'
zipf\t'Zipfian (`--zipf-theta`): plain over `--zipf-range` for the paper\'s benchmark, YCSB\'s scrambled zipfian over the loaded keys otherwise'
latest\t'YCSB\'s latest: zipfian over recency, the newest key most likely'"
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l zipf-theta -d 'The zipfian skew' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l zipf-range -d 'Keys the paper\'s zipfian draws from (shared by all ranks)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -s k -l keys -d 'Keys written per rank (paper), records loaded per rank (YCSB)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l ops -d 'Operations per rank of the paper\'s mixed phase and of YCSB\'s run phases (default: --keys)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l read-pct -d 'Reads in the paper\'s mixed phase, percent (the rest are updates)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l buckets -d 'Buckets per rank (default: keys per rank x 2, a load of 50 %)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -s b -l batch -d 'Keys per batch (read_into / write_into); 1 = one blocking op at a time, like the MPI-DHT' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l depth -d 'Most batches in flight per rank, each serving a part of a batch\'s keys, one part per 32 keys (1 to 8; default and most: what the transport keeps, on libfabric as many windows as its completion queue holds with one to spare). MPI and --shm without a fabric keep 1; so does coarse. Rows say how many an operation used' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l record -d 'Key and value lengths in bytes, as KEY,VALUE (each 1 B to 1 MiB), or a class of the RED-SEA evaluation: S (24,9: 33 B pairs), M (24,99), L (24,999)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l reps -d 'Repetitions of every measurement (median and spread reported)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l latency-ops -d 'Single operations of the closed-loop latency pass that follows each batched phase (0: skip it). At batch 1 the phase itself is that pass' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l seed -d 'Seed of the key draws (the same seed, the same operations)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l bound -d 'A `fabkit perf --json` file whose rates bound the DHT (repeat it: one for delivery-complete writes, one for reads, one for atomics, each measured with -b): each fabkit row then says its bound and how near it came' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l hot-rounds -d 'Rounds of the hot-key check: every rank updates one key at once, then reads it back (0: skip; at most 10^6)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l duration -d 'Soak: repeat the phases, each time on fresh tables, until SECS have passed (at most a day), sampling every rank\'s resident memory, file descriptors, threads, registered regions, /dev/shm segments and busy CPU per operation after each cycle; a count that grows after warm-up fails the run. The table shows the last cycle' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l timeout -d 'Seconds to wait for any one operation before giving up' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l hold -d 'After each table\'s first phase (the paper\'s write, YCSB\'s load), hold the written table until FILE exists (at most an hour), then go on: a window to attack or inspect it from outside (`fabkit intrude`) before the read-back. Rank 0 watches for the file; it must not exist yet, and once made it lets every later table go on at once (Redis rows do not hold). What the services refuse meanwhile is counted in that phase; its time is not' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l path -d 'How operations travel to a key\'s owner: memory (loads and stores within a node, RMA to other nodes), rma (one-sided operations to every rank), message (one request per owner and batch, run by the owner\'s service thread), or auto: memory within a node; across nodes RMA where a NIC or the kernel executes every operation the variant sends, messages where the target\'s CPU would (`fabkit info` says which per provider; under MPI, messages need MPI_THREAD_MULTIPLE)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l json -d 'Also write the results as JSON to FILE (`-` for stdout): `{meta: {command, commit, host, machine, launch, provider, notes}, runs: [{system, variant, transport, workload, distribution, record, ranks, batch, depth, phase, ops_per_sec, writes_per_sec, reads_per_sec, latency_us, cpu_ns_per_op, nominal_cycles_per_op, bytes_per_byte, vs_redis, counters, hot_key, ...}]}`' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l csv -d 'Also write one CSV row per run to FILE (`-` for stdout)' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l mpi -d 'Run over MPI instead of libfabric (under mpirun): one-sided RMA on a window of this kind on the rma path (the MPI-DHT\'s own setting, same algorithms), point-to-point messages on the message path. `auto` takes memory on one node and messages across nodes where MPI gives MPI_THREAD_MULTIPLE: give --path rma to measure MPI windows' -r -f -a "allocate\t'MPI_Win_allocate (on one node Open MPI\'s osc sm maps shared memory)'
create\t'MPI_Win_create over MPI_Alloc_mem (goes through the BTL in Open MPI)'"
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l evict -d 'Allow more records than the table has buckets (they evict others); without it such a run is refused'
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l no-redis -d 'Skip the Redis rows (they run when redis-server is installed)'
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -l shm -d 'Give ranks on the same node direct access to each other\'s regions (shared memory), with libfabric for the rest; atomics are CPU atomics only when every rank is on this node. The spelling of --path memory'
complete -c fabkit -n "__fish_fabkit_using_subcommand dht" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabkit -n "__fish_fabkit_using_subcommand model" -l ops -d 'A `fabkit dht --json` file measured on one node without a fabric (`fabkit dht -p shm --shm -n 2`): each fabkit row\'s counters give its operations per DHT operation, and its busy CPU per operation the host\'s own cost' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand model" -l perf -d 'A `fabkit perf -b --json` file of the fabric modelled (repeat: delivery-complete writes, reads at the bucket\'s and the chunk\'s sizes, compare-and-swap): its rates and its CPU per transfer' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand model" -l pps -d 'Instead of perf files, a NIC: the operations per second a pair of them carries, both directions together, in packets per second (the RoCE NIC of RED-SEA\'s D2.3 report: 15e6)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand model" -l packets -d 'With --pps: packets per RMA operation (request and response, or write and acknowledgement)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand model" -l xfer-ns -d 'With --pps: the host\'s busy CPU per transfer, ns (posting it and reading its completion; the NIC does the rest)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand model" -l itself -d 'Where a rank\'s operations on its own region go: through the fabric (the plain path) or, reads and writes, to memory (`fabkit dht --shm`; its atomics stay on the fabric)' -r -f -a "fabric\t'Through the fabric, like the others (loop-back)'
memory\t'Memory accesses (the same-node path)'"
complete -c fabkit -n "__fish_fabkit_using_subcommand model" -l cores -d 'Cores of all the job\'s hosts together, which perf\'s CPU per transfer is spent on (default: this machine\'s, which the testbed\'s namespaces share; on two real hosts, both hosts\' cores)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand model" -l measured -d 'A `fabkit dht --json` file measured on the fabric modelled: each prediction is put beside the row of the same variant, workload and phase. Compared with only, never used to predict' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand model" -l json -d 'Also write the predictions as JSON to FILE (`-` for stdout)' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand model" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -s p -l provider -d 'libfabric provider (see `fabkit info`)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -s d -l domain -d 'Domain: interface (eth0) or device (mlx5_0), or a network the ranks share (10.77.1.0/24). Default: chosen, `lo` when all ranks share a host' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -s n -l ranks -d 'In-process ranks (ignored under mpirun or fabkit launch, where each process is one)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -s v -l variant -d 'Which variant(s) cache the chemistry' -r -f -a "all\t'All four, one after the other'
coarse\t'Coarse-grained region lock'
fine\t'Per-bucket lock words'
lockfree\t'Checksums, no locks'
chunked\t'Chunked linear probing'"
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l path -d 'How the cache\'s operations travel to a key\'s owner: memory, rma, message (one request per owner and batch, answered by the owner\'s service thread while it computes) or auto (see `fabkit dht --help`)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l grid -d 'The grid, columns x rows' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l steps -d 'Time steps (each: the flow, then the chemistry of every cell)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l digits -d 'Significant digits the chemistry\'s inputs are rounded to in the cache\'s key, comma-separated: 1 to 15, or `exact` (the inputs\' bits: a hit is the result of the very same inputs)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l substeps -d 'The chemistry\'s cost: implicit Euler sub-steps per cell and time step, each solved by Newton\'s method; comma-separated for several (rows report the microseconds a solve took)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l rounds -d 'Rounds: in each, per cost, the run without the cache, then every variant and rounding with it (odd rounds: the cached runs in reverse, then the uncached one); speed-ups are per round' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -s b -l batch -d 'Cells per cache lookup (read_into, then write_into for the misses). Cells of one batch that share a key all miss (they are looked up before any is written), so the hit rate falls as batches grow toward a rank\'s whole share' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l buckets -d 'Buckets per rank (default: two per distinct input a rank could write, cells x steps / ranks, at most 2^20; more inputs evict)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l floor -d 'Relative errors are taken against max(|uncached|, FLOOR x the species\' largest uncached concentration): ahead of the front Mg, Cl and dolomite are zero, and a difference there counts against the species\' own scale' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l timeout -d 'Seconds to wait for any one operation before giving up' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l json -d 'Also write the results as JSON to FILE (`-` for stdout): `{meta: {command, commit, host, machine, launch, provider, grid, steps, dt, batch, floor, notes}, runs: [{variant, transport, digits, substeps, ranks, rounds: [{secs, uncached_secs, speedup}], speedup, hit_rate, checksum_mismatches, evictions, solve_us, cache_us_per_cell, break_even_us, break_even_measured_us, break_even_outside, error: {max, mean, species}, ...}]}`' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l charts -d 'Write speed-up and error against rounding as SVG charts into DIR (speedup-*.svg, error-*.svg), one per solver cost' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l grids -d 'Write the last round\'s final grids as CSV into DIR (one row per cell: x, y, then the nine species, exact to the bit): uncached-S.csv and VARIANT-dD-S.csv, S the sub-steps, D the digits' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l mpi -d 'Run over MPI one-sided RMA on a window of this kind instead of libfabric (under mpirun)' -r -f -a "allocate\t'MPI_Win_allocate (on one node Open MPI\'s osc sm maps shared memory)'
create\t'MPI_Win_create over MPI_Alloc_mem (goes through the BTL in Open MPI)'"
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -l shm -d 'Give ranks on the same node direct access to each other\'s regions (shared memory), with libfabric for the rest. The spelling of --path memory'
complete -c fabkit -n "__fish_fabkit_using_subcommand surrogate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabkit -n "__fish_fabkit_using_subcommand demo" -s n -l ranks -d 'Ranks per check' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand demo" -s h -l help -d 'Print help'
complete -c fabkit -n "__fish_fabkit_using_subcommand launch" -l netns -d 'Network namespaces, one rank each, in rank order' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand launch" -s n -l ranks -d 'Ranks: without --netns, plain processes; with --mpi, spread evenly over the namespaces' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand launch" -l timeout -d 'Seconds a rank waits for the others at each bootstrap exchange (the file bootstrap; under --mpi, each rank\'s command\'s own --timeout applies to its MPI bootstrap)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand launch" -l mpi -d 'Launch with Open MPI\'s mpirun instead (MPI bootstrap), -n ranks spread evenly over the namespaces; needs a testbed with management links (`ipoib-eval testbed up --mgmt`)'
complete -c fabkit -n "__fish_fabkit_using_subcommand launch" -s h -l help -d 'Print help'
complete -c fabkit -n "__fish_fabkit_using_subcommand clean" -l dry-run -d 'Say what would be removed, and remove nothing'
complete -c fabkit -n "__fish_fabkit_using_subcommand clean" -s h -l help -d 'Print help'
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -s p -l provider -d 'The job\'s provider; the intruder opens its own endpoint on it' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -s d -l domain -d 'The intruder\'s own domain: an interface, or a network such as 10.77.0.0/16' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -l scan -d 'Hosts to scan, comma-separated IPv4 addresses; `shm` lists this node\'s shm endpoints in /dev/shm instead, and `cm` this node\'s RDMA connection-manager listeners (where verbs;ofi_rxm listens: its port space is not TCP\'s) as the kernel\'s `rdma resource show cm_id` does' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -l ports -d 'Ports scanned on each host (with `cm`: the listeners\' ports taken), FIRST-LAST' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -l want -d 'Scan again until at least this many endpoints answer (the job may still be starting), up to --wait' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -l wait -d 'The longest time to scan for --want endpoints' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -l keys -d 'Keys 0..N are tried in order at each endpoint' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -l random-keys -d 'Random 64-bit keys tried as well, at random offsets' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -l window -d 'Tries in flight at once' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -l timeout -d 'The longest wait for one try\'s completion' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -l duration -d 'Repeat scan and attack until this much time has passed (without it: once)' -r
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -l json -d 'Write the report as JSON to this file (`-` for standard output)' -r -F
complete -c fabkit -n "__fish_fabkit_using_subcommand intrude" -s h -l help -d 'Print help'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "info" -d 'Show the libfabric version, every provider with what it supports, and RDMA devices (like fi_info + ibv_devinfo, but readable)'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "check" -d 'Check RMA read/write and every u64 atomic between ranks, byte for byte and value for value, then race all ranks on shared words'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "perf" -d 'Measure latency, bandwidth and message rate of RMA writes, reads and u64 atomics between two ranks, by size (like fi_rma_bw, fi_rma_pingpong, ib_write_bw, osu_put_latency)'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "mpi-perf" -d 'The same measurements through MPI one-sided RMA (MPI_Put, MPI_Get, MPI_Compare_and_swap, MPI_Fetch_and_op), with a chosen synchronisation (lock-all + flush, lock/unlock, fence, PSCW) and window kind (MPI_Win_allocate or MPI_Win_create). Run under mpirun with 2+ ranks; the output matches `fabkit perf`, so the two can be compared'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "plot" -d 'Draw JSON results as SVG charts and/or a markdown table: perf and mpi-perf against size (rate, bandwidth or latency; MPI dashed), dht against ranks or a soak over time, a surrogate\'s speed-up'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "dht" -d 'Benchmark the distributed hash table as an application\'s cache: the MPI-DHT paper\'s write, read and mixed phases (`-w paper`) and YCSB\'s workloads (`-w load-a,a,b,c,d,f`), per variant (coarse, fine, lockfree, chunked), with Redis beside it in the same run when redis-server is installed: throughput (median and spread of --reps), latency percentiles, CPU time and bytes moved per operation, the DHT\'s counters, and the hot-key check'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "model" -d 'Predict the DHT\'s throughput on a fabric from what the fabric does (`fabkit perf -b --json` files, or a NIC\'s packet rate) and what the DHT costs the host (a `fabkit dht --json` run on one node), per variant, workload and phase: the fabric\'s limit, the cores\' limit, and which binds; beside a measured run if one is given'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "surrogate" -d 'The DHT as the surrogate-model cache of a POET-like reactive-transport simulation (a grid carried by a flow, an iterative chemistry solver per cell and time step, inputs rounded to significant digits as the key): runtime and speed-up against the run without the cache, hit rate, checksum mismatches, the break-even solver cost and the error the rounding introduces, per variant, rounding and solver cost'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "demo" -d 'The embedded default job: `info`, `check` with 4 in-process ranks on every provider here that offers RMA and atomics, then a short DHT benchmark (every variant, the paper\'s workload and YCSB A, Redis beside it when installed) on the fastest same-node path: 2 in-process ranks sharing their regions through the same-node shortcut'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "launch" -d 'Start a fabkit command as ranks in processes on this machine, one per network namespace (each a host of its own) or -n plain processes, meeting through a shared directory (or, with --mpi, under mpirun): `fabkit launch --netns ipoib-a,ipoib-b -- fabkit check -p \'tcp;ofi_rxm\'`'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "clean" -d 'Remove the shared-memory segments killed ranks left in /dev/shm: fabkit\'s whose process has exited and the libfabric shm provider\'s that no process has mapped, this user\'s only. Says what it removed'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "intrude" -d 'Try to read and write a running job\'s ranks from outside it, as an attacker on the same network would: find them by scanning, then guess keys for RMA and forge messages. Exit 1 if anything worked'
complete -c fabkit -n "__fish_fabkit_using_subcommand help; and not __fish_seen_subcommand_from info check perf mpi-perf plot dht model surrogate demo launch clean intrude help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
