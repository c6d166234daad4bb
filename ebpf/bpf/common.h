// What every program in bpf/ needs: the kernel's BPF definitions, section
// names, the map-lookup helper and aya-obj's legacy map definition. No
// libbpf headers: helpers are declared by the numbers of <linux/bpf.h>.

#ifndef FABKIT_BPF_COMMON_H
#define FABKIT_BPF_COMMON_H

#include <linux/bpf.h>
#include <linux/types.h>

#define SEC(name) __attribute__((section(name), used))

static void *(*bpf_map_lookup_elem)(void *map, const void *key) =
    (void *)BPF_FUNC_map_lookup_elem;

// The legacy map definition aya-obj reads from the "maps" section.
struct map_def {
	__u32 type;
	__u32 key_size;
	__u32 value_size;
	__u32 max_entries;
	__u32 map_flags;
};

#endif
