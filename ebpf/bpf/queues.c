// Per-queue packet counters and size histograms for one interface.
//
// TX is counted at the net:net_dev_start_xmit tracepoint, which fires after
// the kernel (or a policy) chose the TX queue: `queue_mapping` there is the
// queue the packet really took. A GSO super-packet is one event carrying its
// segment count. RX is counted at net:netif_receive_skb, reached by every
// received packet whichever path it took (NAPI/GRO, backlog), under the
// skb's raw `queue_mapping`: a NIC driver records queue q as q + 1 (0: none
// recorded); veth records nothing and leaves the sender's TX queue q, which
// is its own RX queue q. The loader knows the driver and reads it so.
//
// Only packets on the watched interface (ifindex within one network
// namespace) are counted, and of those only the flows matching the rules
// (IPv4 protocol, addresses and ports, either direction, 0 = any).
//
// Kernel structures are read with CO-RE (clang's preserve_access_index):
// the loader relocates every field offset against the running kernel's BTF,
// so one object serves kernels whose layouts differ.
//
// Built by build.rs: clang -O2 -g -target bpf.

#include "common.h"

static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *src) =
    (void *)BPF_FUNC_probe_read_kernel;

// Queues counted one by one; higher queue numbers share the last slot.
#define QUEUES 64
// log2 buckets of packet length and of GSO segment counts.
#define SIZE_BUCKETS 18
#define SEGS_BUCKETS 17
#define RULES 8

struct rule {
	__u8 proto; // IPPROTO_UDP, IPPROTO_TCP; 0 = any
	__u8 pad[3];
	__u32 addr_a; // network order; 0 = any
	__u32 addr_b;
	__u16 port_a; // network order; 0 = any
	__u16 port_b;
};

struct config {
	__u32 ifindex;
	__u32 netns; // inode number of the interface's network namespace
	__u32 nrules; // 0: every IPv4 and IPv6 packet on the interface
	__u32 pad;
	struct rule rules[RULES];
};

struct counter {
	__u64 packets;
	__u64 bytes;
	__u64 segments; // wire packets: GSO segments, 1 for a plain packet
};

SEC("maps") struct map_def config = {
    .type = BPF_MAP_TYPE_ARRAY,
    .key_size = 4,
    .value_size = sizeof(struct config),
    .max_entries = 1,
};
SEC("maps") struct map_def tx_queues = {
    .type = BPF_MAP_TYPE_PERCPU_ARRAY,
    .key_size = 4,
    .value_size = sizeof(struct counter),
    .max_entries = QUEUES,
};
// Indexed by the raw queue_mapping (see the top).
SEC("maps") struct map_def rx_queues = {
    .type = BPF_MAP_TYPE_PERCPU_ARRAY,
    .key_size = 4,
    .value_size = sizeof(struct counter),
    .max_entries = QUEUES + 1,
};
SEC("maps") struct map_def tx_sizes = {
    .type = BPF_MAP_TYPE_PERCPU_ARRAY,
    .key_size = 4,
    .value_size = 8,
    .max_entries = SIZE_BUCKETS,
};
SEC("maps") struct map_def tx_segs = {
    .type = BPF_MAP_TYPE_PERCPU_ARRAY,
    .key_size = 4,
    .value_size = 8,
    .max_entries = SEGS_BUCKETS,
};
SEC("maps") struct map_def rx_sizes = {
    .type = BPF_MAP_TYPE_PERCPU_ARRAY,
    .key_size = 4,
    .value_size = 8,
    .max_entries = SIZE_BUCKETS,
};

// Just the fields used; CO-RE finds them in the kernel's own layouts.
#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
struct ns_common {
	unsigned int inum;
};
struct net {
	struct ns_common ns;
};
typedef struct {
	struct net *net;
} possible_net_t;
struct net_device {
	int ifindex;
	possible_net_t nd_net;
};
struct sk_buff {
	struct net_device *dev;
	unsigned char *data;
	__u16 queue_mapping;
	unsigned int len;
};
struct trace_event_raw_net_dev_start_xmit {
	__u16 queue_mapping;
	const void *skbaddr;
	unsigned int len;
	int network_offset;
	__u16 gso_segs;
};
struct trace_event_raw_net_dev_template {
	void *skbaddr;
	unsigned int len;
};
#pragma clang attribute pop

#define READ(dst, src) bpf_probe_read_kernel(&(dst), sizeof(dst), &(src))

static __always_inline __u32 log2_bucket(__u64 v, __u32 buckets)
{
	__u32 b = 0;
#pragma unroll
	for (int i = 0; i < 32; i++) {
		if (v > 1) {
			v >>= 1;
			b++;
		}
	}
	return b < buckets ? b : buckets - 1;
}

static __always_inline void add(void *map, __u32 key, __u64 v)
{
	__u64 *c = bpf_map_lookup_elem(map, &key);
	if (c)
		*c += v;
}

// Whether the skb is on the watched interface and in a watched flow;
// `l3` is the offset of the network header from skb->data.
static __always_inline int watched(struct sk_buff *skb, int l3)
{
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || cfg->ifindex == 0)
		return 0;
	struct net_device *dev = 0;
	READ(dev, skb->dev);
	if (!dev)
		return 0;
	int ifindex = 0;
	READ(ifindex, dev->ifindex);
	if ((__u32)ifindex != cfg->ifindex)
		return 0;
	struct net *net = 0;
	READ(net, dev->nd_net.net);
	unsigned int inum = 0;
	if (net)
		READ(inum, net->ns.inum);
	if (inum != cfg->netns)
		return 0;
	if (cfg->nrules == 0)
		return 1;
	unsigned char *data = 0;
	READ(data, skb->data);
	if (!data || l3 < 0 || l3 > 128)
		return 0;
	__u8 ip[20];
	if (bpf_probe_read_kernel(ip, sizeof(ip), data + l3) < 0)
		return 0;
	if ((ip[0] >> 4) != 4)
		return 0;
	__u8 proto = ip[9];
	__u32 src = *(__u32 *)&ip[12], dst = *(__u32 *)&ip[16];
	__u16 ports[2] = {0, 0};
	if (proto == 6 || proto == 17)
		bpf_probe_read_kernel(ports, sizeof(ports), data + l3 + (ip[0] & 0xf) * 4);
#pragma unroll
	for (int i = 0; i < RULES; i++) {
		if ((__u32)i >= cfg->nrules)
			break;
		struct rule *r = &cfg->rules[i];
		if (r->proto && r->proto != proto)
			continue;
		int fwd = (!r->addr_a || r->addr_a == src) && (!r->addr_b || r->addr_b == dst) &&
			  (!r->port_a || r->port_a == ports[0]) && (!r->port_b || r->port_b == ports[1]);
		int rev = (!r->addr_a || r->addr_a == dst) && (!r->addr_b || r->addr_b == src) &&
			  (!r->port_a || r->port_a == ports[1]) && (!r->port_b || r->port_b == ports[0]);
		if (fwd || rev)
			return 1;
	}
	return 0;
}

SEC("tracepoint/net/net_dev_start_xmit")
int fabkit_q_tx(struct trace_event_raw_net_dev_start_xmit *ctx)
{
	// The verifier allows only constant offsets into the context: load
	// every field first (the barrier keeps the compiler from forming
	// ctx + offset pointers later).
	struct sk_buff *skb = (struct sk_buff *)ctx->skbaddr;
	int l3 = ctx->network_offset;
	__u32 q = ctx->queue_mapping;
	__u32 len = ctx->len;
	__u64 segs = ctx->gso_segs;
	asm volatile("" ::: "memory");
	if (!watched(skb, l3))
		return 0;
	if (q >= QUEUES)
		q = QUEUES - 1;
	if (!segs)
		segs = 1;
	struct counter *c = bpf_map_lookup_elem(&tx_queues, &q);
	if (c) {
		c->packets += 1;
		c->bytes += len;
		c->segments += segs;
	}
	add(&tx_sizes, log2_bucket(len, SIZE_BUCKETS), 1);
	add(&tx_segs, log2_bucket(segs, SEGS_BUCKETS), 1);
	return 0;
}

SEC("tracepoint/net/netif_receive_skb")
int fabkit_q_rx(struct trace_event_raw_net_dev_template *ctx)
{
	struct sk_buff *skb = (struct sk_buff *)ctx->skbaddr;
	__u32 len = ctx->len;
	asm volatile("" ::: "memory");
	// Here skb->data is the network header (the MAC header is pulled).
	if (!watched(skb, 0))
		return 0;
	__u16 raw = 0;
	READ(raw, skb->queue_mapping);
	__u32 slot = raw;
	if (slot > QUEUES)
		slot = QUEUES;
	struct counter *c = bpf_map_lookup_elem(&rx_queues, &slot);
	if (c) {
		c->packets += 1;
		c->bytes += len;
		c->segments += 1;
	}
	add(&rx_sizes, log2_bucket(len, SIZE_BUCKETS), 1);
	return 0;
}

char _license[] SEC("license") = "GPL";
