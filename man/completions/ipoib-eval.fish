# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_ipoib_eval_global_optspecs
    string join \n h/help V/version
end

function __fish_ipoib_eval_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_ipoib_eval_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_ipoib_eval_using_subcommand
    set -l cmd (__fish_ipoib_eval_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c ipoib-eval -n "__fish_ipoib_eval_needs_command" -s h -l help -d 'Print help'
complete -c ipoib-eval -n "__fish_ipoib_eval_needs_command" -s V -l version -d 'Print version'
complete -c ipoib-eval -n "__fish_ipoib_eval_needs_command" -f -a "server" -d 'Serve tests (several clients at once) until killed'
complete -c ipoib-eval -n "__fish_ipoib_eval_needs_command" -f -a "client" -d 'Run one test against a server and report'
complete -c ipoib-eval -n "__fish_ipoib_eval_needs_command" -f -a "testbed" -d 'Several hosts on one machine: network namespaces joined by veth pairs (optionally through a gateway between two MTU domains)'
complete -c ipoib-eval -n "__fish_ipoib_eval_needs_command" -f -a "sweep" -d 'Run every combination of a sweep file\'s axes on testbeds of their own, appending a CSV row per run (resumes: runs already in the file are skipped)'
complete -c ipoib-eval -n "__fish_ipoib_eval_needs_command" -f -a "restore" -d 'Put back interface settings a sweep or server recorded and could not restore (it crashed or was killed): every record of this network namespace, or IFACE\'s. (In a named namespace: `ip netns exec NS ipoib-eval restore`, which also shows that namespace\'s /sys.)'
complete -c ipoib-eval -n "__fish_ipoib_eval_needs_command" -f -a "summary" -d 'Summarise a sweep CSV: medians and ranges per point (summary.json) and SVG charts per experiment'
complete -c ipoib-eval -n "__fish_ipoib_eval_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand server" -s p -l port -d 'Control port' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand server" -s B -l bind -d 'Listen on this address only' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand server" -l dev -d 'Bind to this interface (SO_BINDTODEVICE), e.g. ib0' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand server" -l max-sessions -d 'Tests served at once at most' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand server" -l idle-timeout -d 'Seconds a new connection may take to say what it wants' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand server" -l netns -d 'Run inside this network namespace (e.g. a testbed\'s NAME-b)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand server" -l sweep-iface -d 'Let sweeps set this interface (queues, MTU, offloads, qdisc, XPS, txqueuelen): recorded before the first change, restored when the server ends (also on Ctrl-C; after a crash: `ipoib-eval restore`)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand server" -s 1 -l one-off -d 'Serve one test, then exit with its result'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand server" -s q -l quiet -d 'No line per test (the "listening" line is still printed)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand server" -s h -l help -d 'Print help'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s c -l client -d 'Server host, as iperf3 spells it: `-c HOST` is `HOST`' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s p -l port -d 'Server control port' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s t -l time -d 'Seconds to send for (default 10)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s k -l count -d 'Messages to send per stream, instead of a time' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s P -l parallel -d 'Parallel streams (per direction)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s l -l len -d 'Message length in bytes, with K/M suffixes (default TCP 128K, UDP 1472)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s b -l bitrate -d 'Target rate per stream, bits/s with k/M/G/T (0: unlimited; UDP default 1M, as iperf3)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l send -d 'Send path: send, sg:IOVECS, mmsg:BATCH, gso:SEGMENTS[:BATCH], zerocopy' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l recv -d 'Receive path: recv, mmsg:BATCH, gro, gro:BATCH' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s w -l window -d 'Socket buffer size on both ends, bytes with K/M suffixes' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s i -l interval -d 'Seconds between interval reports (0: none)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l json-file -d 'Also write the JSON report to FILE' -r -F
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l csv -d 'Append one CSV row per direction to FILE (header if new)' -r -F
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s B -l bind -d 'Local address to bind' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l dev -d 'Bind to this interface (SO_BINDTODEVICE), e.g. ib0' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l cpus -d 'Pin the client\'s stream threads to these CPUs, round-robin (0,2-3)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l server-cpus -d 'Pin the server\'s stream threads likewise' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l timeout -d 'Seconds any one wait on the peer may take' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l netns -d 'Run inside this network namespace (e.g. a testbed\'s NAME-a)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s u -l udp -d 'UDP instead of TCP'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s R -l reverse -d 'The server sends'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l bidir -d 'Both send, on streams of their own'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s N -l nodelay -d 'TCP_NODELAY'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l rr -d 'TCP request/response: -l bytes each way, one in flight per stream'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s J -l json -d 'Print the JSON report to stdout instead of text'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s 4 -l ipv4 -d 'IPv4 only'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s 6 -l ipv6 -d 'IPv6 only'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -l unconnected -d 'UDP with the `send` path: unconnected sockets and sendto(2), so no TX queue is cached per socket (a tc program\'s queue choice holds per packet)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand client" -s h -l help -d 'Print help'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and not __fish_seen_subcommand_from up down status help" -s h -l help -d 'Print help'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and not __fish_seen_subcommand_from up down status help" -f -a "up" -d 'Build a testbed (replacing a stale one of the same name) and leave it up'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and not __fish_seen_subcommand_from up down status help" -f -a "down" -d 'Remove a testbed; nothing to remove is not an error'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and not __fish_seen_subcommand_from up down status help" -f -a "status" -d 'List the namespaces of a testbed that exist (exit 1 if none)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and not __fish_seen_subcommand_from up down status help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -l name -d 'Name: namespaces are NAME-a and NAME-b (and NAME-g with --gateway)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -l queues -d 'TX and RX queues per veth' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -l mtu -d 'MTU (of the a-side link with --gateway)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -l mtu-b -d 'MTU of the b-side link behind the gateway' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -l offload -d 'Offload setting for every veth, FEATURE=on|off (ethtool -K); repeat' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -l qdisc -d 'Root qdisc of every veth (noqueue, pfifo_fast, fq, ...)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -l txqueuelen -d 'txqueuelen of every veth' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -l gateway -d 'Route through a third namespace between two MTU domains'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -l ipv6 -d 'Keep IPv6 on (off by default: ND/MLD chatter spoils packet counts)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -l mgmt -d 'Give each host a management link to the root namespace (`mg`, 10.78.0.0/16, default route), for launchers such as mpirun'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -l outsider -d 'A third host (`NAME-x`, 10.77.3.2) behind the gateway on a link of its own: it reaches both hosts but sees none of their traffic (`fabkit intrude` runs there). Needs --gateway'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from up" -s h -l help -d 'Print help'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from down" -l name -d 'Testbed name' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from down" -s h -l help -d 'Print help'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from status" -l name -d 'Testbed name' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from status" -s h -l help -d 'Print help'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from help" -f -a "up" -d 'Build a testbed (replacing a stale one of the same name) and leave it up'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from help" -f -a "down" -d 'Remove a testbed; nothing to remove is not an error'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from help" -f -a "status" -d 'List the namespaces of a testbed that exist (exit 1 if none)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand testbed; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand sweep" -s o -l output -d 'The CSV to append to' -r -F
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand sweep" -l plots -d 'Where the summary and charts go (default: beside the CSV, in a directory named after it)' -r -F
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand sweep" -l iface -d 'Run over this interface instead of testbeds: its settings are recorded, set per point and restored at the end (needs --peer)' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand sweep" -l peer -d 'The peer\'s address on --iface; it runs `ipoib-eval server --sweep-iface IFACE`' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand sweep" -s p -l port -d 'The peer server\'s control port' -r
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand sweep" -l dry-run -d 'List the runs and the time estimate, run nothing'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand sweep" -s h -l help -d 'Print help'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand restore" -s h -l help -d 'Print help'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand summary" -s o -l output -d 'Output directory (default: beside the CSV, named after it)' -r -F
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand summary" -s h -l help -d 'Print help'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand help; and not __fish_seen_subcommand_from server client testbed sweep restore summary help" -f -a "server" -d 'Serve tests (several clients at once) until killed'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand help; and not __fish_seen_subcommand_from server client testbed sweep restore summary help" -f -a "client" -d 'Run one test against a server and report'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand help; and not __fish_seen_subcommand_from server client testbed sweep restore summary help" -f -a "testbed" -d 'Several hosts on one machine: network namespaces joined by veth pairs (optionally through a gateway between two MTU domains)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand help; and not __fish_seen_subcommand_from server client testbed sweep restore summary help" -f -a "sweep" -d 'Run every combination of a sweep file\'s axes on testbeds of their own, appending a CSV row per run (resumes: runs already in the file are skipped)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand help; and not __fish_seen_subcommand_from server client testbed sweep restore summary help" -f -a "restore" -d 'Put back interface settings a sweep or server recorded and could not restore (it crashed or was killed): every record of this network namespace, or IFACE\'s. (In a named namespace: `ip netns exec NS ipoib-eval restore`, which also shows that namespace\'s /sys.)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand help; and not __fish_seen_subcommand_from server client testbed sweep restore summary help" -f -a "summary" -d 'Summarise a sweep CSV: medians and ranges per point (summary.json) and SVG charts per experiment'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand help; and not __fish_seen_subcommand_from server client testbed sweep restore summary help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand help; and __fish_seen_subcommand_from testbed" -f -a "up" -d 'Build a testbed (replacing a stale one of the same name) and leave it up'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand help; and __fish_seen_subcommand_from testbed" -f -a "down" -d 'Remove a testbed; nothing to remove is not an error'
complete -c ipoib-eval -n "__fish_ipoib_eval_using_subcommand help; and __fish_seen_subcommand_from testbed" -f -a "status" -d 'List the namespaces of a testbed that exist (exit 1 if none)'
