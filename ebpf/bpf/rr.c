// Round-robin TX queue selection, one packet to the next queue.
//
// The kernel has no helper to pick a TX queue from BPF. What works: a tc
// egress program (TCX) runs before the queue is chosen and may write
// skb->queue_mapping; writing q + 1 marks the skb as if queue q had been
// recorded for it, and the kernel's flow hash (skb_tx_hash) then takes q
// instead of hashing. That choice is made only when nothing overrides it:
// XPS must be cleared, and a socket that cached a queue (any socket with a
// cached route: TCP, connected UDP) keeps it unless the packet is marked
// free to move (ooo_okay). Unconnected UDP sockets cache nothing, so they
// follow packet by packet. TCP marks a packet free to move when none of
// its earlier data is still charged to the socket; across a veth the charge
// goes when the receiving side takes the packet (ip_rcv orphans it), which
// on this testbed is mostly before the next send, so TCP follows nearly per
// (super-)packet there; on a NIC it moves only after idle moments, as TX
// completions come back. Connected UDP never moves. All of this holds for
// drivers without a queue selector of their own (ndo_select_queue), veth
// among them. The per-queue counters of queues.c show which happened.
//
// Built by build.rs: clang -O2 -g -target bpf.

#include "common.h"

// One per CPU: each CPU deals its packets out over the queues in turn (no
// atomic shared by all CPUs, and one sender thread sees plain round-robin).
struct rr_state {
	__u32 queues; // set by the loader on every CPU; 0 leaves packets alone
	__u32 next;
};

SEC("maps") struct map_def rr_state = {
    .type = BPF_MAP_TYPE_PERCPU_ARRAY,
    .key_size = 4,
    .value_size = sizeof(struct rr_state),
    .max_entries = 1,
};

SEC("classifier") int fabkit_rr(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct rr_state *st = bpf_map_lookup_elem(&rr_state, &zero);
	if (!st || st->queues == 0)
		return 0; // TC_ACT_OK
	__u32 q = st->next;
	if (q >= st->queues)
		q = 0;
	st->next = q + 1;
	skb->queue_mapping = q + 1;
	return 0; // TC_ACT_OK: on to the queue choice
}

char _license[] SEC("license") = "GPL";
