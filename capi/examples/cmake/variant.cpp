// variant.c's check from C++: the header, the MPIDHT:: target's variant
// and MPI's C API (Open MPI's C++ bindings kept out by the package) in a
// C++ program.
#include <LUCX/DHT.h>
#include <mpi.h>

#include <cstdint>
#include <cstdio>

static std::uint64_t hash(int, const void *key) {
  return static_cast<std::uint64_t>(*static_cast<const std::uint32_t *>(key)) *
         0x9e3779b97f4a7c15ull;
}

int main(int argc, char **argv) {
  int rank = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  DHT_init_t init{4, 4, 64, hash, MPI_COMM_WORLD};
  DHT *t = DHT_create(&init);
  if (t == nullptr) {
    std::printf("RESULT rank %d: DHT_create failed: %s\n", rank,
                fabkit_dht_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::uint32_t key = 2000u + static_cast<std::uint32_t>(rank);
  std::uint32_t value = 3u * key, back = 0;
  int w = DHT_write(t, &key, &value, nullptr, nullptr);
  MPI_Barrier(MPI_COMM_WORLD);
  int r = DHT_read(t, &key, &back);
  bool ok = w == DHT_SUCCESS && r == DHT_SUCCESS && back == value;
  std::printf("RESULT rank %d: %s, %s\n", rank, ok ? "ok" : "wrong read",
              fabkit_dht_describe(t));
  std::fflush(stdout);
  DHT_free(t, nullptr);
  MPI_Finalize();
  return ok ? 0 : 1;
}
