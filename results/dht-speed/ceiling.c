// ceiling.c: the ceiling loop run-speed.sh measures against. A copy of the
// workplace's reference program shared/bench/ceiling.c, kept here so the
// repository holds what the figures in speed/ were measured with; only this
// comment is added, the code below is unchanged.
//
// The memory ceiling of a same-node lock-free DHT operation on this machine:
// P processes share one anonymous mapping of P regions of B buckets (192 B apart);
// each writes K keys (hash an 80 B key, pick rank and bucket, read the meta byte,
// build bucket = meta + key + value + CRC32C, copy it in), then reads them back
// (copy 189 B out, CRC32C, compare the key). No locks, no library: the floor a
// DHT operation cannot go under. A second read phase uses `fabkit dht`'s mix:
// each process reads every process's keys and as many absent ones ("read-all").
// Build: gcc -O2 -msse4.2 -o ceiling ceiling.c
// Run:   ./ceiling [P=2] [K=2000000] [B=262144]
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
#include <nmmintrin.h>
#define KEY 80
#define VAL 104
#define BKT 192
static uint64_t mix(uint64_t x){x^=x>>33;x*=0xff51afd7ed558ccdULL;x^=x>>33;x*=0xc4ceb9fe1a85ec53ULL;x^=x>>33;return x;}
static uint64_t hkey(const uint8_t*k){uint64_t h=0x9e3779b97f4a7c15ULL;for(int i=0;i<KEY;i+=8){uint64_t w;memcpy(&w,k+i,8);h=mix(h^w);}return h;}
static uint32_t crc(const uint8_t*p,int n){uint64_t c=~0ULL;int i=0;for(;i+8<=n;i+=8){uint64_t w;memcpy(&w,p+i,8);c=_mm_crc32_u64(c,w);}for(;i<n;i++)c=_mm_crc32_u8((uint32_t)c,p[i]);return ~(uint32_t)c;}
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int P=argc>1?atoi(argv[1]):2; long K=argc>2?atol(argv[2]):2000000; long B=argc>3?atol(argv[3]):(1<<18);
  size_t per=B*BKT; uint8_t*mem=mmap(0,per*P,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  volatile double*res=mmap(0,1<<16,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  memset(mem,0,per*P);
  for(int r=0;r<P;r++) if(fork()==0){
    uint8_t key[KEY],val[VAL],buf[BKT]; memset(key,0,KEY); memset(val,r,VAL); long hits=0;
    double t0=now();
    for(long i=0;i<K;i++){ uint64_t id=mix(i*P+r); memcpy(key,&id,8);
      uint64_t h=hkey(key); int tr=mix(h)%P; long b=(h>>17)%B; uint8_t*bk=mem+tr*per+b*BKT;
      volatile uint8_t meta=bk[0]; (void)meta;
      memcpy(buf+1,key,KEY); memcpy(buf+1+KEY,val,VAL); buf[0]=1; uint32_t c=crc(buf+1,KEY+VAL); memcpy(buf+1+KEY+VAL,&c,4);
      memcpy(bk,buf,1+KEY+VAL+4);}
    double t1=now();
    for(long i=0;i<K;i++){ uint64_t id=mix(i*P+r); memcpy(key,&id,8);
      uint64_t h=hkey(key); int tr=mix(h)%P; long b=(h>>17)%B; uint8_t*bk=mem+tr*per+b*BKT;
      memcpy(buf,bk,1+KEY+VAL+4); uint32_t c; memcpy(&c,buf+1+KEY+VAL,4);
      if(c==crc(buf+1,KEY+VAL) && memcmp(buf+1,key,KEY)==0) hits++;}
    double t2=now(); long hall=0;
    for(long q=0;q<=P;q++) for(long i=0;i<K;i++){ /* q<P: process (r+q)%P's keys; q==P: absent keys */
      uint64_t id = q<P ? mix(i*P+(r+q)%P) : mix((K+i)*P+r); memcpy(key,&id,8);
      uint64_t h=hkey(key); int tr=mix(h)%P; long b=(h>>17)%B; uint8_t*bk=mem+tr*per+b*BKT;
      memcpy(buf,bk,1+KEY+VAL+4); uint32_t c; memcpy(&c,buf+1+KEY+VAL,4);
      if(c==crc(buf+1,KEY+VAL) && memcmp(buf+1,key,KEY)==0) hall++;}
    double t3=now(); res[r*5]=t1-t0; res[r*5+1]=t2-t1; res[r*5+2]=hits; res[r*5+3]=t3-t2; res[r*5+4]=hall; _exit(0);}
  for(int r=0;r<P;r++) wait(0);
  double tw=0,tr=0,ta=0,h=0,ha=0; for(int r=0;r<P;r++){ if(res[r*5]>tw)tw=res[r*5]; if(res[r*5+1]>tr)tr=res[r*5+1]; if(res[r*5+3]>ta)ta=res[r*5+3]; h+=res[r*5+2]; ha+=res[r*5+4];}
  printf("ranks %d keys/rank %ld: write %.2f Mops/s read %.2f Mops/s (hits %.0f) read-all %.2f Mops/s (hits %.0f of %ld)\n",P,K,P*K/tw/1e6,P*K/tr/1e6,h,(double)P*(P+1)*K/ta/1e6,ha,(long)P*P*K);
}
