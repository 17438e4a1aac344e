/*
 * eopt's Kokkos Tools connector: timestamps regions, kernels, deep copies and fences of an
 * unmodified Kokkos application and writes them as a trace in the dashboard layout
 * (events.csv + metadata.json, version 1). Power is sampled by `eopt measure --kokkos` on
 * the same clock (CLOCK_REALTIME, ns since the UNIX epoch) and added as power_samples.csv.
 *
 * Loaded through KOKKOS_TOOLS_LIBS (or KOKKOS_PROFILE_LIBRARY). Environment:
 *   EOPT_KOKKOS_TRACE_DIR   output folder (default ./eopt-kokkos-trace); under MPI each
 *                           rank writes rank_<N>/ inside it (rank from OMPI_COMM_WORLD_RANK,
 *                           PMIX_RANK, PMI_RANK, MV2_COMM_WORLD_RANK or SLURM_PROCID)
 *   EOPT_KOKKOS_FENCES=0    do not record fences
 *
 * How it records. A callback stores one fixed-size binary record in a per-thread ring:
 * no lock, no formatting, no I/O on the application thread. A small thread of the
 * connector appends the new records to DIR/events.records every 10 ms (one pwritev), so
 * they are in the page cache within about 10 ms of the event. Formatting happens once, at
 * the end: Kokkos::finalize, an exit without it, or a fatal signal (SIGABRT, SIGSEGV,
 * SIGBUS, SIGFPE, SIGILL, SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGXCPU) converts the records
 * into events.csv and metadata.json (which says how the program ended) and removes the
 * records file. The signal path is async-signal-safe (system calls and this file's own
 * formatting); the program's own handler runs after it, and an unhandled signal is raised
 * again with its default action, so the exit status stays the program's. Only SIGKILL (or
 * _exit) leaves the records file behind: eopt reads the events from it then, losing at
 * most the last 10 ms, and the events still open end at the last time recorded.
 *
 * Names are interned per thread: each distinct name is stored once, as valid UTF-8 (a
 * byte sequence that is not UTF-8 becomes U+FFFD, as Python's "replace" does), whole (up
 * to MAX_NAME_BYTES), with unnamed kernels' type names demangled as kokkos-tools does.
 * Nesting is unbounded: a thread's stack of open events grows. Bad orders (pop without
 * push, end without begin) are counted in metadata.json, never fatal.
 *
 * The records file, native byte order (little-endian on x86-64 and arm64):
 *   header (64 bytes): "EOPTKKR1", u32 version (1), u32 record bytes (40), u32 block
 *           header bytes (32), u32 offset of the first block (64), u64 start_unix_ns,
 *           i32 pid, i32 rank, zeros
 *   blocks, back to back: u32 magic (BLOCK_MAGIC), u32 kind, u32 bytes (the whole block),
 *           u32 thread, u64 value, u32 count, u32 0; then the payload:
 *     records (kind 1)  `count` records (record_t) of the thread; value: the sequence
 *                       number of the first (a thread's records are numbered from 0)
 *     name (kind 2)     `value` bytes of UTF-8 (0-padded to 8): the name numbered `count`
 *     stack (kind 3)    `count` events open on the thread at time `value` (ns), outermost
 *                       first; a thread's last stack block is its latest
 *   record_t (40 bytes): u64 tag (id in bits 0-55, category in 56-59 as in
 *           CATEGORY_NAMES, kind in 60-63: 1 closed, 3 open), u64 parent id, u64 start_ns,
 *           u64 end_ns (0 while open), u32 name number, u32 Kokkos device id
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define EOPT_CONNECTOR_VERSION "1.1"
#define RECORDS_FILE "events.records"
#define TEMP_FILE ".eopt-connector.tmp"
#define FILE_HEADER_BYTES 64u
#define BLOCK_MAGIC 0x424b4f45u /* "EOKB" */
#define RING_RECORDS 16384u /* a thread's ring of records (power of 2), 640 KiB */
#define FLUSH_NS 10000000ull /* how often the records go to the file */
#define ID_BLOCK 4096u
#define MAX_DEVICES 64
#define MAX_THREADS 1024 /* threads whose unwritten records a signal can still save */
/* eopt's CSV reader refuses fields above 1 MiB: a longer name is cut (with an ellipsis,
 * and counted) so that the trace stays readable. */
#define MAX_NAME_BYTES (512u << 10)
#define ALT_STACK_BYTES (256u << 10)
#define OUT_BUFFER_BYTES (1u << 20)

enum category { USER_REGION, PARALLEL_FOR, PARALLEL_REDUCE, PARALLEL_SCAN, DEEP_COPY, FENCE };
#define N_CATEGORIES 6
/* 16 bytes each, so a line copies one in a single fixed-size move */
static const char CATEGORY_NAMES[N_CATEGORIES][16] = {
    "USER_REGION", "PARALLEL_FOR", "PARALLEL_REDUCE", "PARALLEL_SCAN", "DEEP_COPY", "FENCE"};
static const uint8_t CATEGORY_LENGTHS[N_CATEGORIES] = {11, 12, 15, 13, 9, 5};
enum block_kind { BLOCK_RECORDS = 1, BLOCK_NAME = 2, BLOCK_STACK = 3 };
#define KIND_CLOSED 1ull
#define KIND_OPEN 3ull
#define ID_MASK ((1ull << 56) - 1)
#define TAG(id, category, kind) ((id) | (uint64_t)(category) << 56 | (kind) << 60)
#define TAG_CATEGORY(tag) ((unsigned)((tag) >> 56) & 15u)
#define TAG_KIND(tag) ((tag) >> 60)
/* How the program ended, for metadata.json. */
enum ending { END_FINALIZE, END_EXIT, END_KILLED, END_HANDED_OVER };

struct Kokkos_Profiling_KokkosPDeviceInfo {
  size_t deviceID;
};
struct Kokkos_Profiling_SpaceHandle {
  char name[64];
};

typedef struct {
  char magic[8];
  uint32_t version, record_bytes, block_header_bytes, first_block;
  uint64_t start_unix_ns;
  int32_t pid, rank;
  char zeros[24];
} file_header_t;

typedef struct {
  uint32_t magic, kind, bytes, thread;
  uint64_t value;
  uint32_t count, reserved;
} block_header_t;

typedef struct {
  uint64_t tag, parent, start_ns, end_ns;
  uint32_t name, device;
} record_t;

_Static_assert(sizeof(file_header_t) == FILE_HEADER_BYTES, "file header layout");
_Static_assert(sizeof(block_header_t) == 32, "block header layout");
_Static_assert(sizeof(record_t) == 40, "record layout");

#define NO_NAME UINT32_MAX

typedef struct {
  uint64_t hash;
  char *key; /* the name as the program gave it */
  uint32_t len, id, kernel;
} slot_t;

/* What one thread records with. Its thread appends records at `head`; the flusher writes
 * them out up to `head` and moves `tail` (under `flush_lock`, which the thread also takes
 * when its ring is full). Counters only grow: record number k lives in ring[k % size]
 * until k + RING_RECORDS is written. A signal handler on any thread reads all of it. */
typedef struct {
  record_t *ring;
  uint64_t head, tail, tail_seen;
  pthread_mutex_t flush_lock;
  uint32_t thread;
  uint64_t snapshot_ns, snapshot_head; /* the last stack written, and when */
  uint32_t snapshot_depth;
  record_t *stack;
  uint32_t depth, cap;
  uint64_t next_id, id_end;
  slot_t *tab;
  uint32_t tab_mask, tab_used;
  char *scratch; /* deep-copy names are built here */
  size_t scratch_cap;
  uint32_t skipped_regions; /* pushes refused for want of memory: their pops skip too */
  int dead;                 /* recording failed on this thread: callbacks are counted lost */
  int retired;              /* its thread ended: a new thread may take it over */
} tstate_t;

static __thread tstate_t *tls;
static tstate_t dead_state = {.dead = 1};

static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER, threads_lock =
    PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static pthread_key_t thread_key;
static tstate_t *threads[MAX_THREADS];
static uint32_t n_threads;
static int started, recording, finalized, record_fences = 1, records_full;
static int dir_fd = -1, rec_fd = -1, converting;
static pid_t owner_pid;
static uint64_t file_end, id_base, start_unix_ns, kokkos_interface_version;
static uint32_t n_names, n_ordinals;
static uint64_t n_unclosed, n_unmatched_pop, n_unmatched_end, n_too_deep, n_lost, n_cut;
static uint32_t n_ending; /* threads inside thread_end */
static int load_seq, rank = -1;
static uint32_t n_devices;
static size_t devices[MAX_DEVICES];
static char out_dir[4096], host[256];

/* Utilities ---------------------------------------------------------------------------- */
static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void count(uint64_t *counter) { __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED); }

static inline int is_finalized(void) { return __atomic_load_n(&finalized, __ATOMIC_RELAXED); }

static int mkdir_p(const char *path) {
  char tmp[4096];
  size_t len = strlen(path);
  if (len == 0 || len >= sizeof tmp) return -1;
  memcpy(tmp, path, len + 1);
  for (char *p = tmp + 1; *p; ++p) {
    if (*p == '/') {
      *p = 0;
      if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
      *p = '/';
    }
  }
  if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
  return 0;
}

static int mpi_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                     "MV2_COMM_WORLD_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; ++i) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      char *end;
      long r = strtol(v, &end, 10);
      if (*end == 0 && r >= 0) return (int)r;
    }
  }
  return -1;
}

/* write(2) until done; the one output primitive, safe in a signal handler. */
static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Memory from the kernel directly: the conversion runs in signal handlers, where malloc
 * is not safe, and reads rings and stacks that are therefore never given back. */
static void *raw_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* Text output into a buffer that is written out as it fills ----------------------------- */
typedef struct {
  int fd, failed;
  char *buf;
  size_t len, cap;
} sink_t;

static void sink_flush(sink_t *o) {
  if (o->len && !o->failed && write_all(o->fd, o->buf, o->len) != 0)
    o->failed = errno ? errno : EIO;
  o->len = 0;
}

static void put_bytes(sink_t *o, const char *p, size_t n) {
  while (n) {
    if (o->len == o->cap) sink_flush(o);
    size_t k = o->cap - o->len < n ? o->cap - o->len : n;
    memcpy(o->buf + o->len, p, k);
    o->len += k;
    p += k;
    n -= k;
  }
}

static void put_str(sink_t *o, const char *s) { put_bytes(o, s, strlen(s)); }


/* v < 10^8 as 8 ASCII digits in one word, in memory order, computed in registers (SWAR:
 * the lanes of one 64-bit word are divided by 100, then by 10, at once). */
static inline uint64_t digit_word(uint32_t v) {
  uint64_t x = v / 10000 | (uint64_t)(v % 10000) << 32;      /* 4 + 4 digits  */
  uint64_t q = (x * 10486 >> 20) & 0x0000007F0000007Full;    /* each lane / 100 */
  x = (x - q * 100) << 16 | q;                               /* 2-digit lanes */
  q = (x * 103 >> 10) & 0x000F000F000F000Full;               /* each lane / 10 */
  x = (x - q * 10) << 8 | q;                                 /* 1-digit bytes */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  x = __builtin_bswap64(x);
#endif
  return x | 0x3030303030303030ull;
}

static inline void put8(char *p, uint32_t v) {
  uint64_t w = digit_word(v);
  memcpy(p, &w, 8);
}

static inline unsigned digits8(uint32_t v) { /* v < 10^8 */
  return 1u + (v >= 10) + (v >= 100) + (v >= 1000) + (v >= 10000) + (v >= 100000) +
         (v >= 1000000) + (v >= 10000000);
}

/* v < 10^8 in decimal at p; returns the end. Up to 8 bytes from p are written: callers
 * leave room. */
static inline __attribute__((always_inline)) char *fmt_small(char *p, uint32_t v) {
  unsigned n = digits8(v);
  uint64_t w = digit_word(v);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  w <<= 8 * (8 - n); /* drop the leading zeros: the first bytes */
#else
  w >>= 8 * (8 - n);
#endif
  memcpy(p, &w, 8);
  return p + n;
}

/* Any v, eight digits at a time (the rare case: ids past 10^9, timestamps' leading digits). */
static __attribute__((noinline)) char *fmt_large(char *p, uint64_t v) {
  if (v < 100000000ull) return fmt_small(p, (uint32_t)v);
  p = fmt_large(p, v / 100000000ull);
  put8(p, (uint32_t)(v % 100000000ull));
  return p + 8;
}

/* "000" … "999", and one entry of slack so a 4-byte load at any offset of the last stays
 * inside; filled before the first conversion. */
static char LUT3[1001][4];

static void fill_digit_table(void) {
  for (int i = 0; i < 1000; ++i) {
    LUT3[i][0] = (char)('0' + i / 100);
    LUT3[i][1] = (char)('0' + i / 10 % 10);
    LUT3[i][2] = (char)('0' + i % 10);
  }
}

/* v < 1000 without leading zeros, then groups of exactly three digits. */
static inline char *put_lead3(char *p, uint32_t v) {
  unsigned n = 1u + (v >= 10) + (v >= 100);
  memcpy(p, LUT3[v] + 3 - n, 4);
  return p + n;
}

static inline char *put3(char *p, uint32_t v) {
  memcpy(p, LUT3[v], 4);
  return p + 3;
}

/* Decimal digits of v at p; returns the end (up to 8 bytes after it may be scratched):
 * ids and device numbers are small, so those go three digits per table look-up. */
static inline __attribute__((always_inline)) char *fmt_u64(char *p, uint64_t v) {
  if (v < 1000) return put_lead3(p, (uint32_t)v);
  if (v < 1000000) {
    p = put_lead3(p, (uint32_t)v / 1000);
    return put3(p, (uint32_t)v % 1000);
  }
  if (v < 1000000000) {
    uint32_t w = (uint32_t)v;
    p = put_lead3(p, w / 1000000);
    p = put3(p, w / 1000 % 1000);
    return put3(p, w % 1000);
  }
  return fmt_large(p, v);
}

/* Timestamps share their leading digits from one record to the next: the milliseconds
 * since the epoch are formatted once (two at a time are in use: an event that crosses a
 * millisecond), the last six digits by table. */
typedef struct {
  uint64_t ms;
  uint32_t len;
  char text[28];
} ms_text_t;
static ms_text_t ms_cache[2] = {{UINT64_MAX, 0, ""}, {UINT64_MAX, 0, ""}};
static unsigned ms_next;

static inline __attribute__((always_inline)) char *fmt_time(char *p, uint64_t t) {
  if (t < 1000000ull) return fmt_u64(p, t);
  uint64_t ms = t / 1000000ull;
  uint32_t rest = (uint32_t)(t - ms * 1000000ull);
  ms_text_t *c = &ms_cache[0];
  if (c->ms != ms) {
    c = &ms_cache[1];
    if (c->ms != ms) {
      c = &ms_cache[ms_next];
      ms_next ^= 1;
      c->len = (uint32_t)(fmt_large(c->text, ms) - c->text);
      c->ms = ms;
    }
  }
  memcpy(p, c->text, 16); /* fixed size, so inlined; the caller leaves room */
  p += c->len;
  p = put3(p, rest / 1000);
  return put3(p, rest % 1000);
}

static void put_u64(sink_t *o, uint64_t v) {
  char tmp[32];
  put_bytes(o, tmp, (size_t)(fmt_u64(tmp, v) - tmp));
}

static void put_i64(sink_t *o, int64_t v) {
  if (v < 0) {
    put_bytes(o, "-", 1);
    put_u64(o, (uint64_t)0 - (uint64_t)v);
  } else {
    put_u64(o, (uint64_t)v);
  }
}

/* A JSON string's body: quotes, backslashes and control characters escaped. */
static void put_json_text(sink_t *o, const char *s) {
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      put_bytes(o, esc, 2);
    } else if (c < 0x20) {
      char esc[6] = {'\\', 'u', '0', '0', "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]};
      put_bytes(o, esc, 6);
    } else {
      put_bytes(o, (const char *)&c, 1);
    }
  }
}

/* Names: valid UTF-8, whole, demangled ------------------------------------------------- */
/* Length of the valid UTF-8 sequence at p (1–4), or 0 with *bad set to the length of the
 * maximal invalid subpart (Unicode's recommended practice, which Python follows). */
static size_t utf8_sequence(const unsigned char *p, size_t n, size_t *bad) {
  unsigned c = p[0], lo = 0x80, hi = 0xBF;
  size_t need;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F; /* no UTF-16 surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
  } else {
    *bad = 1;
    return 0;
  }
  size_t i = 1;
  for (; i <= need && i < n; ++i) {
    if (p[i] < lo || p[i] > hi) break;
    lo = 0x80;
    hi = 0xBF;
  }
  if (i > need) return need + 1;
  *bad = i;
  return 0;
}

/* `s` as valid UTF-8 (malloc'd), or NULL when it already is. */
static char *utf8_repaired(const char *s, size_t len, size_t *out_len) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, bad;
  while (i < len) {
    size_t k = utf8_sequence(p + i, len - i, &bad);
    if (!k) break;
    i += k;
  }
  if (i == len) return NULL;
  char *out = malloc(len * 3 + 1); /* each bad byte may become 3 */
  if (!out) return NULL;
  memcpy(out, s, i);
  size_t o = i;
  while (i < len) {
    size_t k = utf8_sequence(p + i, len - i, &bad);
    if (k) {
      memcpy(out + o, s + i, k);
      o += k;
      i += k;
    } else {
      memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
      i += bad;
    }
  }
  out[o] = 0;
  *out_len = o;
  return out;
}

/* Resolved when the program links the C++ runtime (every Kokkos program does). */
extern char *__cxa_demangle(const char *, char *, size_t *, int *) __attribute__((weak));

/* A typeid name of a class type, as Kokkos names an unnamed kernel's functor: nested (N),
 * local (Z, a lambda in a function), std (S), unnamed (U) or plain (a length). Names a
 * person gives ("fill", "f") are never taken for mangled builtin types. */
static int looks_mangled(const char *s, size_t len) {
  if (!len || !__cxa_demangle) return 0;
  if (!strchr("NZSU0123456789", s[0])) return 0;
  for (size_t i = 0; i < len; ++i)
    if (s[i] == ' ') return 0;
  return 1;
}

static char *demangle_part(const char *s, size_t len) {
  if (!looks_mangled(s, len)) return NULL;
  char *copy = strndup(s, len);
  if (!copy) return NULL;
  int status = -1;
  char *out = __cxa_demangle(copy, NULL, NULL, &status);
  free(copy);
  if (status != 0) {
    free(out);
    return NULL;
  }
  return out;
}

/* An unnamed kernel's name demangled as kokkos-tools does ("<functor>/<tag>" in two
 * parts), malloc'd; NULL when it is not a mangled name. */
static char *demangle_kernel(const char *s, size_t len) {
  const char *slash = memchr(s, '/', len);
  if (!slash || slash == s) return demangle_part(s, len);
  size_t a_len = (size_t)(slash - s), b_len = len - a_len - 1;
  char *a = demangle_part(s, a_len), *b = demangle_part(slash + 1, b_len);
  if (!a && !b) return NULL;
  const char *ap = a ? a : s, *bp = b ? b : slash + 1;
  size_t al = a ? strlen(a) : a_len, bl = b ? strlen(b) : b_len;
  char *out = malloc(al + bl + 2);
  if (out) {
    memcpy(out, ap, al);
    out[al] = '/';
    memcpy(out + al + 1, bp, bl);
    out[al + bl + 1] = 0;
  }
  free(a);
  free(b);
  return out;
}

/* The records file -------------------------------------------------------------------- */
static void note_write_failure(int err) {
  /* one line on stderr, outside any signal handler, once */
  fprintf(stderr, "eopt kokkos connector: cannot write %s/%s (%s); %s\n", out_dir,
          RECORDS_FILE, strerror(err),
          err == ENOSPC ? "the disk is full: free space or set EOPT_KOKKOS_TRACE_DIR elsewhere"
                        : "set EOPT_KOKKOS_TRACE_DIR to a writable local folder");
}

/* Appends one block (its pieces in `iov`) at the end of the records file. A block is
 * counted in `file_end` only once it is whole, so a reader of [0, file_end) never sees
 * half of one. Returns 0 when the file cannot grow (then nothing more is written). */
static int append_block(struct iovec *iov, int n_iov, size_t bytes) {
  int ok = 0, err = 0;
  pthread_mutex_lock(&file_lock);
  if (!records_full) {
    uint64_t off = file_end;
    size_t done = 0;
    while (done < bytes) {
      ssize_t k = pwritev(rec_fd, iov, n_iov, (off_t)(off + done));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        err = k < 0 ? errno : ENOSPC;
        break;
      }
      done += (size_t)k;
      while (n_iov && (size_t)k >= iov->iov_len) { /* a short write: go on after it */
        k -= (ssize_t)iov->iov_len;
        ++iov;
        --n_iov;
      }
      if (n_iov) {
        iov->iov_base = (char *)iov->iov_base + k;
        iov->iov_len -= (size_t)k;
      }
    }
    if (done == bytes) {
      __atomic_store_n(&file_end, off + bytes, __ATOMIC_RELEASE);
      ok = 1;
    } else {
      records_full = 1;
    }
  }
  pthread_mutex_unlock(&file_lock);
  if (err) note_write_failure(err);
  return ok;
}

/* A stack that changed is written with the records (every 10 ms), a deep one less often:
 * 1000 open events every 10 ms, 10 000 every 100 ms. */
static inline uint64_t stack_interval_ns(uint32_t depth) { return (uint64_t)depth * 10000ull; }

/* Writes a thread's new records (and, when it changed, its stack of open events) to the
 * file. The flusher calls it every 10 ms; a thread whose ring is full, or that ends, calls
 * it for itself. The stack is read while its thread may change it: a reader of the file
 * drops a stale open event that also appears closed. */
static void flush_thread(tstate_t *s, uint64_t now, int force_stack) {
  pthread_mutex_lock(&s->flush_lock);
  uint64_t head = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE), tail = s->tail;
  uint32_t depth = __atomic_load_n(&s->depth, __ATOMIC_ACQUIRE);
  block_header_t rh, sh;
  struct iovec iov[5];
  int n = 0;
  size_t bytes = 0;
  if (head > tail) {
    uint64_t count = head - tail;
    size_t first = (size_t)(tail % RING_RECORDS), part = RING_RECORDS - first;
    if (part > count) part = (size_t)count;
    rh = (block_header_t){BLOCK_MAGIC, BLOCK_RECORDS,
                          (uint32_t)(sizeof rh + count * sizeof(record_t)), s->thread, tail,
                          (uint32_t)count, 0};
    iov[n++] = (struct iovec){&rh, sizeof rh};
    iov[n++] = (struct iovec){&s->ring[first], part * sizeof(record_t)};
    if (count > part) iov[n++] = (struct iovec){s->ring, (size_t)(count - part) * sizeof(record_t)};
    bytes += sizeof rh + count * sizeof(record_t);
  }
  int changed = head != s->snapshot_head || depth != s->snapshot_depth;
  if (force_stack || (changed && now - s->snapshot_ns >= stack_interval_ns(depth))) {
    record_t *stack = __atomic_load_n(&s->stack, __ATOMIC_ACQUIRE);
    uint32_t cap = __atomic_load_n(&s->cap, __ATOMIC_ACQUIRE);
    if (depth > cap) depth = cap;
    size_t payload = (size_t)depth * sizeof(record_t);
    if (sizeof sh + payload <= UINT32_MAX) {
      sh = (block_header_t){BLOCK_MAGIC, BLOCK_STACK, (uint32_t)(sizeof sh + payload),
                            s->thread, now, depth, 0};
      iov[n++] = (struct iovec){&sh, sizeof sh};
      if (payload) iov[n++] = (struct iovec){stack, payload};
      bytes += sizeof sh + payload;
      s->snapshot_ns = now;
      s->snapshot_head = head;
      s->snapshot_depth = depth;
    }
  }
  if (n && !append_block(iov, n, bytes) && head > tail)
    __atomic_add_fetch(&n_lost, head - tail, __ATOMIC_RELAXED);
  __atomic_store_n(&s->tail, head, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&s->flush_lock);
}

/* The name numbered `id` goes to the file at once, before any record that uses it. */
static int write_name(tstate_t *s, uint32_t id, const char *text, size_t len) {
  static const char zeros[8];
  block_header_t h = {BLOCK_MAGIC, BLOCK_NAME, (uint32_t)(sizeof h + ((len + 7) & ~(size_t)7)),
                      s->thread, len, id, 0};
  struct iovec iov[3] = {{&h, sizeof h}, {(void *)text, len}, {(void *)zeros, (8 - len % 8) % 8}};
  return append_block(iov, iov[2].iov_len ? 3 : 2, h.bytes);
}

/* The stack of open events, twice as large. The old one stays mapped: a signal handler on
 * another thread may be reading it. */
static int grow_stack(tstate_t *s) {
  size_t cap = s->cap ? 2 * (size_t)s->cap : 64;
  if (cap * sizeof(record_t) > UINT32_MAX) return 0;
  record_t *stack = raw_alloc(cap * sizeof(record_t));
  if (!stack) return 0;
  if (s->depth) memcpy(stack, s->stack, s->depth * sizeof(record_t));
  __atomic_store_n(&s->stack, stack, __ATOMIC_RELEASE);
  __atomic_store_n(&s->cap, (uint32_t)cap, __ATOMIC_RELEASE);
  return 1;
}

/* Interning: a name is made valid, demangled and written once per thread -------------- */
/* memcmp of short names with two overlapping word loads: no call. */
static inline int same_text(const char *a, const char *b, size_t n) {
  if (n >= 8 && n <= 16) {
    uint64_t a0, a1, b0, b1;
    memcpy(&a0, a, 8);
    memcpy(&b0, b, 8);
    memcpy(&a1, a + n - 8, 8);
    memcpy(&b1, b + n - 8, 8);
    return ((a0 ^ b0) | (a1 ^ b1)) == 0;
  }
  if (n >= 4 && n < 8) {
    uint32_t a0, a1, b0, b1;
    memcpy(&a0, a, 4);
    memcpy(&b0, b, 4);
    memcpy(&a1, a + n - 4, 4);
    memcpy(&b1, b + n - 4, 4);
    return ((a0 ^ b0) | (a1 ^ b1)) == 0;
  }
  return memcmp(a, b, n) == 0;
}

static inline uint64_t hash_name(const char *p, size_t len, uint32_t kernel) {
  uint64_t h = (uint64_t)len * 0x9E3779B97F4A7C15ull ^ kernel;
  while (len >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    p += 8;
    len -= 8;
  }
  uint64_t w = 0;
  for (size_t i = 0; i < len; ++i) w |= (uint64_t)(unsigned char)p[i] << (8 * i);
  h = (h ^ w) * 0x94d049bb133111ebull;
  return h ^ (h >> 29);
}

static void grow_table(tstate_t *s) {
  uint32_t cap = (s->tab_mask + 1) * 2;
  slot_t *tab = calloc(cap, sizeof *tab);
  if (!tab) return; /* a fuller table is slower, not wrong */
  for (uint32_t i = 0; i <= s->tab_mask; ++i) {
    slot_t *old = &s->tab[i];
    if (!old->key) continue;
    uint32_t j = (uint32_t)old->hash & (cap - 1);
    while (tab[j].key) j = (j + 1) & (cap - 1);
    tab[j] = *old;
  }
  free(s->tab);
  s->tab = tab;
  s->tab_mask = cap - 1;
}

static uint32_t intern_new(tstate_t *s, const char *name, size_t len, uint64_t h, uint32_t kernel) {
  if (s->tab_used + 1 >= s->tab_mask) return NO_NAME; /* the table could not grow */
  char *demangled = kernel ? demangle_kernel(name, len) : NULL;
  const char *text = demangled ? demangled : name;
  size_t text_len = demangled ? strlen(demangled) : len, fixed_len = 0;
  char *fixed = utf8_repaired(text, text_len, &fixed_len);
  if (fixed) {
    text = fixed;
    text_len = fixed_len;
  }
  char *cut = NULL;
  if (text_len > MAX_NAME_BYTES) {
    size_t keep = MAX_NAME_BYTES; /* at a character boundary */
    while (keep && ((unsigned char)text[keep] & 0xC0) == 0x80) keep--;
    cut = malloc(keep + 3);
    if (cut) {
      memcpy(cut, text, keep);
      memcpy(cut + keep, "\xE2\x80\xA6", 3); /* … */
      text = cut;
      text_len = keep + 3;
    } else {
      text_len = keep;
    }
    count(&n_cut);
  }
  uint32_t id = __atomic_fetch_add(&n_names, 1, __ATOMIC_RELAXED);
  int written = write_name(s, id, text, text_len);
  free(cut);
  free(fixed);
  free(demangled);
  char *key = written ? malloc(len + 1) : NULL;
  if (!key) return written ? id : NO_NAME;
  memcpy(key, name, len);
  key[len] = 0;
  uint32_t i = (uint32_t)h & s->tab_mask;
  while (s->tab[i].key) i = (i + 1) & s->tab_mask;
  s->tab[i] = (slot_t){h, key, (uint32_t)len, id, kernel};
  if (++s->tab_used * 2 > s->tab_mask + 1) grow_table(s);
  return id;
}

static inline uint32_t intern(tstate_t *s, const char *name, uint32_t kernel) {
  if (!name) name = "";
  size_t len = strlen(name);
  uint64_t h = hash_name(name, len, kernel);
  for (uint32_t i = (uint32_t)h & s->tab_mask;; i = (i + 1) & s->tab_mask) {
    slot_t *slot = &s->tab[i];
    if (!slot->key) break;
    if (slot->hash == h && slot->len == len && slot->kernel == kernel &&
        same_text(slot->key, name, len))
      return slot->id;
  }
  return intern_new(s, name, len, h, kernel);
}

/* Threads ---------------------------------------------------------------------------------- */
static void start_recording(void);
static void emit(tstate_t *s, const record_t *f, uint64_t end_ns);

static inline void ensure_started(void) {
  if (__builtin_expect(!__atomic_load_n(&started, __ATOMIC_ACQUIRE), 0))
    pthread_once(&start_once, start_recording);
}

/* Events still open on a thread end now, counted as unclosed. */
static void close_all(tstate_t *s, uint64_t t) {
  while (s->depth) {
    record_t done = s->stack[s->depth - 1];
    __atomic_store_n(&s->depth, s->depth - 1, __ATOMIC_RELEASE);
    emit(s, &done, t);
    count(&n_unclosed);
  }
}

/* A thread that ends: its open events end with it, everything is written, and its state
 * waits for the next new thread. */
static void thread_end(void *arg) {
  tstate_t *s = arg;
  tls = NULL;
  if (!s || s == &dead_state) return;
  /* A thread may still be ending when the application finalizes: Python's join returns
   * before the thread's key destructors run. Either this thread sees the finalize and
   * leaves its open events on its stack, where the conversion reads them, or the
   * finalize sees it ending and waits for it (sequentially consistent on both sides). */
  __atomic_add_fetch(&n_ending, 1, __ATOMIC_SEQ_CST);
  if (!__atomic_load_n(&finalized, __ATOMIC_SEQ_CST)) {
    uint64_t t = now_ns();
    close_all(s, t);
    flush_thread(s, t, 1);
    for (uint32_t i = 0; i <= s->tab_mask; ++i) free(s->tab[i].key);
    memset(s->tab, 0, (s->tab_mask + 1) * sizeof(slot_t));
    s->tab_used = 0;
    s->skipped_regions = 0;
    s->next_id = s->id_end = 0;
    __atomic_store_n(&s->retired, 1, __ATOMIC_RELEASE);
  }
  __atomic_sub_fetch(&n_ending, 1, __ATOMIC_SEQ_CST);
}

/* Waits, at most about a second, for threads in the middle of ending. */
static void wait_for_ending_threads(void) {
  struct timespec pause = {0, 1000000};
  for (int k = 0; k < 1000 && __atomic_load_n(&n_ending, __ATOMIC_SEQ_CST); ++k)
    nanosleep(&pause, NULL);
}

static tstate_t *new_state(void) {
  pthread_mutex_lock(&threads_lock);
  for (uint32_t i = 0; i < n_threads; ++i) {
    if (__atomic_load_n(&threads[i]->retired, __ATOMIC_ACQUIRE)) {
      tstate_t *s = threads[i];
      s->retired = 0;
      pthread_mutex_unlock(&threads_lock);
      return s;
    }
  }
  int full = n_threads == MAX_THREADS;
  pthread_mutex_unlock(&threads_lock);
  if (full) return NULL; /* the flusher could not reach it: such a thread records nothing */
  tstate_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->tab_mask = 63;
  s->tab = calloc(s->tab_mask + 1, sizeof(slot_t));
  s->ring = raw_alloc(RING_RECORDS * sizeof(record_t));
  if (!s->tab || !s->ring || !grow_stack(s)) {
    free(s->tab);
    if (s->ring) munmap(s->ring, RING_RECORDS * sizeof(record_t));
    free(s);
    return NULL;
  }
  pthread_mutex_init(&s->flush_lock, NULL);
  s->thread = __atomic_fetch_add(&n_ordinals, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&threads_lock);
  int added = n_threads < MAX_THREADS;
  if (added) {
    threads[n_threads] = s;
    __atomic_store_n(&n_threads, n_threads + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&threads_lock);
  return added ? s : NULL; /* (a lost race for the last place leaks one state) */
}

static tstate_t *thread_start(void) {
  ensure_started();
  if (!recording || __atomic_load_n(&finalized, __ATOMIC_ACQUIRE)) return NULL;
  tstate_t *s = new_state();
  if (!s) {
    tls = &dead_state;
    return tls;
  }
  tls = s;
  pthread_setspecific(thread_key, s);
  return s;
}

static inline tstate_t *state(void) {
  tstate_t *s = tls;
  if (__builtin_expect(!s, 0)) s = thread_start();
  return s;
}

/* Events ---------------------------------------------------------------------------------- */
static inline void emit(tstate_t *s, const record_t *f, uint64_t end_ns) {
  uint64_t head = s->head;
  if (__builtin_expect(head - s->tail_seen >= RING_RECORDS, 0)) {
    s->tail_seen = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
    if (head - s->tail_seen >= RING_RECORDS) { /* the flusher fell behind: write it here */
      flush_thread(s, end_ns, 0);
      s->tail_seen = head;
    }
  }
  record_t *r = &s->ring[head % RING_RECORDS];
  r->parent = f->parent;
  r->start_ns = f->start_ns;
  r->end_ns = end_ns;
  r->name = f->name;
  r->device = f->device;
  r->tag = (f->tag & ~(15ull << 60)) | KIND_CLOSED << 60;
  __atomic_store_n(&s->head, head + 1, __ATOMIC_RELEASE);
}

static uint64_t open_event(const char *name, uint8_t category, uint32_t device) {
  tstate_t *s = state();
  if (__builtin_expect(!s || s->dead || is_finalized(), 0)) {
    if (s) count(&n_lost);
    return 0;
  }
  uint64_t t = now_ns();
  if (__builtin_expect(s->next_id == s->id_end, 0)) {
    s->next_id = __atomic_fetch_add(&id_base, ID_BLOCK, __ATOMIC_RELAXED) + 1;
    s->id_end = s->next_id + ID_BLOCK;
  }
  uint64_t id = s->next_id++;
  uint32_t kernel = category >= PARALLEL_FOR && category <= PARALLEL_SCAN;
  uint32_t nm = intern(s, name, kernel);
  uint32_t depth = s->depth;
  if (__builtin_expect(depth == s->cap, 0) && !grow_stack(s)) {
    count(&n_too_deep);
    if (category == USER_REGION) s->skipped_regions++;
    return id;
  }
  record_t *f = &s->stack[depth];
  f->parent = depth ? s->stack[depth - 1].tag & ID_MASK : 0;
  f->start_ns = t;
  f->end_ns = 0;
  f->name = nm;
  f->device = device;
  f->tag = TAG(id, category, KIND_OPEN);
  __atomic_store_n(&s->depth, depth + 1, __ATOMIC_RELEASE);
  return id;
}

/* Closes the innermost open event matching `id` (any id when 0) and `category` (any when
 * 255). Events opened after it on this thread stay open. Returns 0 when none matched. */
static int close_event(uint64_t id, uint8_t category) {
  uint64_t t = now_ns();
  tstate_t *s = tls;
  if (__builtin_expect(!s, 0)) return 0;
  if (__builtin_expect(s->dead || is_finalized(), 0)) {
    count(&n_lost);
    return 1;
  }
  for (uint32_t i = s->depth; i-- > 0;) {
    record_t *f = &s->stack[i];
    if ((id == 0 || (f->tag & ID_MASK) == id) &&
        (category == 255 || TAG_CATEGORY(f->tag) == category)) {
      record_t done = *f;
      /* off the stack before it becomes a record: a signal in between loses the event,
       * and never shows it twice */
      if (i + 1 < s->depth) memmove(f, f + 1, (size_t)(s->depth - i - 1) * sizeof(record_t));
      __atomic_store_n(&s->depth, s->depth - 1, __ATOMIC_RELEASE);
      emit(s, &done, t);
      return 1;
    }
  }
  return 0;
}

/* Converting the records into the dashboard layout ---------------------------------------- */
typedef struct {
  const char *text;
  uint32_t len, quote;
} name_ref_t;

static char out_buffer[OUT_BUFFER_BYTES];
static record_t copy_buffer[RING_RECORDS];

static uint32_t needs_quotes(const char *p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] == ',' || p[i] == '"' || p[i] == '\n' || p[i] == '\r') return 1;
  return 0;
}

static void put_csv_field(sink_t *o, const name_ref_t *nm) {
  if (!nm->quote) {
    put_bytes(o, nm->text, nm->len);
    return;
  }
  put_bytes(o, "\"", 1);
  const char *p = nm->text, *end = p + nm->len;
  while (p < end) {
    const char *q = memchr(p, '"', (size_t)(end - p));
    if (!q) {
      put_bytes(o, p, (size_t)(end - p));
      break;
    }
    put_bytes(o, p, (size_t)(q - p + 1));
    put_bytes(o, "\"", 1);
    p = q + 1;
  }
  put_bytes(o, "\"", 1);
}

/* Copies a short name with two overlapping word moves: no loop, no call. */
static inline void copy_text(char *dst, const char *src, size_t n) {
  if (n >= 8 && n <= 16) {
    uint64_t a, b;
    memcpy(&a, src, 8);
    memcpy(&b, src + n - 8, 8);
    memcpy(dst, &a, 8);
    memcpy(dst + n - 8, &b, 8);
  } else if (n > 16 && n <= 32) {
    uint64_t a[2], b[2];
    memcpy(a, src, 16);
    memcpy(b, src + n - 16, 16);
    memcpy(dst, a, 16);
    memcpy(dst + n - 16, b, 16);
  } else if (n >= 4 && n < 8) {
    uint32_t a, b;
    memcpy(&a, src, 4);
    memcpy(&b, src + n - 4, 4);
    memcpy(dst, &a, 4);
    memcpy(dst + n - 4, &b, 4);
  } else if (n < 4) {
    for (size_t i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    memcpy(dst, src, n);
  }
}

/* One events.csv line, as ever: id,parent_id,name,category,start_ns,end_ns,device_id. */
static void put_event(sink_t *o, const record_t *r, const name_ref_t *nm, uint64_t end_ns) {
  unsigned cat = TAG_CATEGORY(r->tag);
  size_t room = 192 + (size_t)nm->len * 2;
  if (o->cap - o->len < room) sink_flush(o);
  if (o->cap - o->len >= room) {
    char *p = fmt_u64(o->buf + o->len, r->tag & ID_MASK);
    *p++ = ',';
    p = fmt_u64(p, r->parent);
    *p++ = ',';
    if (nm->quote) {
      o->len = (size_t)(p - o->buf);
      put_csv_field(o, nm);
      p = o->buf + o->len;
    } else {
      copy_text(p, nm->text, nm->len);
      p += nm->len;
    }
    *p++ = ',';
    memcpy(p, CATEGORY_NAMES[cat], 16);
    p += CATEGORY_LENGTHS[cat];
    *p++ = ',';
    p = fmt_time(p, r->start_ns);
    *p++ = ',';
    p = fmt_time(p, end_ns);
    *p++ = ',';
    if (r->device < 10)
      *p++ = (char)('0' + r->device);
    else
      p = fmt_u64(p, r->device);
    *p++ = '\n';
    o->len = (size_t)(p - o->buf);
    return;
  }
  /* a name longer than the buffer: the line goes out piece by piece */
  char tmp[48];
  put_u64(o, r->tag & ID_MASK);
  put_bytes(o, ",", 1);
  put_u64(o, r->parent);
  put_bytes(o, ",", 1);
  put_csv_field(o, nm);
  put_bytes(o, ",", 1);
  put_str(o, CATEGORY_NAMES[cat]);
  put_bytes(o, ",", 1);
  put_bytes(o, tmp, (size_t)(fmt_time(tmp, r->start_ns) - tmp));
  put_bytes(o, ",", 1);
  put_bytes(o, tmp, (size_t)(fmt_time(tmp, end_ns) - tmp));
  put_bytes(o, ",", 1);
  put_u64(o, r->device);
  put_bytes(o, "\n", 1);
}

static const char *signal_name(int sig) {
  switch (sig) {
    case SIGABRT: return "SIGABRT";
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGHUP: return "SIGHUP";
    case SIGXCPU: return "SIGXCPU";
    default: return "a signal";
  }
}

/* What happened, in words: metadata's "message", and the note on stderr. */
static void put_message(sink_t *o, enum ending how, int sig, uint64_t kept, uint64_t open) {
  switch (how) {
    case END_FINALIZE: put_str(o, "the program finalized Kokkos; "); break;
    case END_EXIT: put_str(o, "the program exited without calling Kokkos::finalize; "); break;
    case END_KILLED:
      put_str(o, "the program was killed by ");
      put_str(o, signal_name(sig));
      put_str(o, "; ");
      break;
    case END_HANDED_OVER:
      put_str(o, "the program received ");
      put_str(o, signal_name(sig));
      put_str(o, " and its own handler took over; ");
      break;
  }
  put_u64(o, kept);
  put_str(o, kept == 1 ? " event kept" : " events kept");
  if (open) {
    put_str(o, " (");
    put_u64(o, open);
    put_str(o, " still open, ended at the signal)");
  }
}

/* The trace folder's files are written as a temporary file, then renamed: a reader sees
 * the old file or the new one, never half of one. */
static int open_temp(void) {
  return openat(dir_fd, TEMP_FILE, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
}

static int commit_temp(int fd, sink_t *o, const char *name) {
  sink_flush(o);
  int failed = o->failed;
  if (close(fd) != 0) failed = 1;
  /* The old file goes first: ext4 flushes a file renamed over another to disk at once
   * (auto_da_alloc), which would cost the program a synchronous write. */
  if (!failed) unlinkat(dir_fd, name, 0);
  if (failed || renameat(dir_fd, TEMP_FILE, dir_fd, name) != 0) {
    unlinkat(dir_fd, TEMP_FILE, 0);
    return -1;
  }
  return 0;
}

static const char *const ENDINGS[] = {"finalize", "exit", "killed",
                                      "signal handled by the program"};

static int write_metadata(enum ending how, int sig, uint64_t end_ns, uint64_t kept,
                          uint64_t open) {
  static char buf[16384];
  int fd = open_temp();
  if (fd < 0) return -1;
  sink_t o = {.fd = fd, .buf = buf, .cap = sizeof buf};
  put_str(&o, "{\n  \"format\": \"energy-dashboard-for-kokkos\",\n  \"version\": 1,\n"
              "  \"recorded_by\": \"eopt kokkos connector " EOPT_CONNECTOR_VERSION "\",\n"
              "  \"pid\": ");
  put_i64(&o, owner_pid);
  put_str(&o, ",\n  \"rank\": ");
  put_i64(&o, rank);
  put_str(&o, ",\n  \"host\": \"");
  put_json_text(&o, host);
  put_str(&o, "\",\n  \"start_unix_ns\": ");
  put_u64(&o, start_unix_ns);
  put_str(&o, ",\n  \"end_unix_ns\": ");
  put_u64(&o, end_ns);
  put_str(&o, ",\n  \"kokkos_interface_version\": ");
  put_u64(&o, kokkos_interface_version);
  put_str(&o, ",\n  \"load_sequence\": ");
  put_i64(&o, load_seq);
  put_str(&o, ",\n  \"fences_recorded\": ");
  put_str(&o, record_fences ? "true" : "false");
  put_str(&o, ",\n  \"kokkos_devices\": [");
  for (uint32_t i = 0; i < n_devices; ++i) {
    if (i) put_str(&o, ", ");
    put_u64(&o, devices[i]);
  }
  put_str(&o, "],\n  \"ended\": \"");
  put_str(&o, ENDINGS[how]);
  put_str(&o, "\",\n");
  if (how == END_KILLED || how == END_HANDED_OVER) {
    put_str(&o, "  \"signal\": \"");
    put_str(&o, signal_name(sig));
    put_str(&o, "\",\n");
  }
  put_str(&o, "  \"message\": \"");
  put_message(&o, how, sig, kept, open);
  put_str(&o, "\",\n  \"counts\": {\"events\": ");
  put_u64(&o, kept);
  static const char *const keys[] = {"unclosed", "pop_without_push", "end_without_begin",
                                     "too_deep", "lost", "names_cut"};
  uint64_t values[] = {__atomic_load_n(&n_unclosed, __ATOMIC_RELAXED) + open,
                       __atomic_load_n(&n_unmatched_pop, __ATOMIC_RELAXED),
                       __atomic_load_n(&n_unmatched_end, __ATOMIC_RELAXED),
                       __atomic_load_n(&n_too_deep, __ATOMIC_RELAXED),
                       __atomic_load_n(&n_lost, __ATOMIC_RELAXED),
                       __atomic_load_n(&n_cut, __ATOMIC_RELAXED)};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; ++i) {
    put_str(&o, ", \"");
    put_str(&o, keys[i]);
    put_str(&o, "\": ");
    put_u64(&o, values[i]);
  }
  put_str(&o, "}\n}\n");
  return commit_temp(fd, &o, "metadata.json");
}

static inline const name_ref_t *name_of(const name_ref_t *names, uint32_t nn, uint32_t id) {
  static const name_ref_t unnamed = {"", 0, 0};
  return id < nn && names[id].text ? &names[id] : &unnamed;
}

/* Every event into events.csv, then metadata.json: the records in the file, those still
 * in the threads' buffers, and the events still open (ending now). Async-signal-safe:
 * system calls, static buffers and memory from mmap only. */
static int write_trace(enum ending how, int sig, uint64_t *kept_out) {
  uint64_t t = now_ns();
  uint64_t end = __atomic_load_n(&file_end, __ATOMIC_ACQUIRE);
  uint32_t nn = __atomic_load_n(&n_names, __ATOMIC_ACQUIRE);
  uint32_t nt = __atomic_load_n(&n_threads, __ATOMIC_ACQUIRE);
  uint32_t no = __atomic_load_n(&n_ordinals, __ATOMIC_ACQUIRE);
  char *base = mmap(NULL, end, PROT_READ, MAP_PRIVATE | MAP_POPULATE, rec_fd, 0);
  if (base == MAP_FAILED) return -1;
  size_t names_bytes = ((size_t)nn + 1) * sizeof(name_ref_t);
  size_t seqs_bytes = ((size_t)no + 1) * sizeof(uint64_t);
  name_ref_t *names = raw_alloc(names_bytes);
  uint64_t *seqs = raw_alloc(seqs_bytes); /* per thread: records up to here are in the file */
  int fd = names && seqs ? open_temp() : -1;
  int rc = -1;
  uint64_t kept = 0, open = 0;
  if (fd >= 0) {
    for (uint64_t off = FILE_HEADER_BYTES; off + sizeof(block_header_t) <= end;) {
      const block_header_t *h = (const block_header_t *)(base + off);
      if (h->magic != BLOCK_MAGIC || h->bytes < sizeof *h || h->bytes > end - off) break;
      if (h->kind == BLOCK_NAME && h->count < nn && h->value <= h->bytes - sizeof *h) {
        const char *text = (const char *)(h + 1);
        names[h->count] = (name_ref_t){text, (uint32_t)h->value, needs_quotes(text, h->value)};
      }
      off += h->bytes;
    }
    sink_t o = {.fd = fd, .buf = out_buffer, .cap = sizeof out_buffer};
    put_str(&o, "id,parent_id,name,category,start_ns,end_ns,device_id\n");
    ms_cache[0].ms = ms_cache[1].ms = UINT64_MAX;
    for (uint64_t off = FILE_HEADER_BYTES; off + sizeof(block_header_t) <= end;) {
      const block_header_t *h = (const block_header_t *)(base + off);
      if (h->magic != BLOCK_MAGIC || h->bytes < sizeof *h || h->bytes > end - off) break;
      if (h->kind == BLOCK_RECORDS && h->count <= (h->bytes - sizeof *h) / sizeof(record_t)) {
        const record_t *r = (const record_t *)(h + 1);
        for (uint32_t i = 0; i < h->count; ++i, ++r) {
          if (TAG_KIND(r->tag) != KIND_CLOSED || TAG_CATEGORY(r->tag) >= N_CATEGORIES) continue;
          put_event(&o, r, name_of(names, nn, r->name), r->end_ns);
          kept++;
        }
        if (h->thread < no && h->value + h->count > seqs[h->thread])
          seqs[h->thread] = h->value + h->count;
      }
      off += h->bytes;
    }
    /* records not in the file yet: copied out of the ring, then kept unless the thread
     * overwrote them meanwhile */
    for (uint32_t i = 0; i < nt; ++i) {
      tstate_t *s = threads[i];
      uint64_t head = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE);
      uint64_t from = s->thread < no ? seqs[s->thread] : 0;
      if (head > RING_RECORDS && from < head - RING_RECORDS) from = head - RING_RECORDS;
      if (from >= head) continue;
      for (uint64_t k = from; k < head; ++k) copy_buffer[k - from] = s->ring[k % RING_RECORDS];
      uint64_t now_head = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE);
      uint64_t valid = now_head > RING_RECORDS ? now_head - RING_RECORDS : 0;
      for (uint64_t k = from < valid ? valid : from; k < head; ++k) {
        const record_t *r = &copy_buffer[k - from];
        if (TAG_KIND(r->tag) != KIND_CLOSED || TAG_CATEGORY(r->tag) >= N_CATEGORIES) continue;
        put_event(&o, r, name_of(names, nn, r->name), r->end_ns);
        kept++;
      }
    }
    /* open events, innermost first, read after the records: an event that closes
     * meanwhile is missed, never written twice */
    for (uint32_t i = 0; i < nt; ++i) {
      tstate_t *s = threads[i];
      if (__atomic_load_n(&s->retired, __ATOMIC_ACQUIRE)) continue;
      uint32_t cap = __atomic_load_n(&s->cap, __ATOMIC_ACQUIRE);
      record_t *stack = __atomic_load_n(&s->stack, __ATOMIC_ACQUIRE);
      uint32_t depth = __atomic_load_n(&s->depth, __ATOMIC_ACQUIRE);
      uint64_t previous = 0;
      for (uint32_t k = depth < cap ? depth : cap; k-- > 0;) {
        record_t r = stack[k];
        /* an event moved down the stack meanwhile shows twice, side by side */
        if (TAG_KIND(r.tag) != KIND_OPEN || TAG_CATEGORY(r.tag) >= N_CATEGORIES ||
            (r.tag & ID_MASK) == previous)
          continue;
        previous = r.tag & ID_MASK;
        put_event(&o, &r, name_of(names, nn, r.name), t);
        kept++;
        open++;
      }
    }
    rc = commit_temp(fd, &o, "events.csv");
  }
  if (rc == 0) rc = write_metadata(how, sig, t, kept, open);
  munmap(base, end);
  if (names) munmap(names, names_bytes);
  if (seqs) munmap(seqs, seqs_bytes);
  if (kept_out) *kept_out = kept;
  return rc;
}

/* One conversion at a time; a signal inside a conversion on its own thread skips its own. */
static int claim_conversion(void) {
  int me = (int)syscall(SYS_gettid);
  for (int tries = 0; tries < 30000; ++tries) {
    int expected = 0;
    if (__atomic_compare_exchange_n(&converting, &expected, me, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return 1;
    if (expected == me) return 0;
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
  return 0;
}

static void release_conversion(void) { __atomic_store_n(&converting, 0, __ATOMIC_RELEASE); }

/* Signals ---------------------------------------------------------------------------------- */
static const int SIGNALS[] = {SIGABRT, SIGSEGV, SIGBUS,  SIGFPE, SIGILL,
                              SIGTERM, SIGINT,  SIGQUIT, SIGHUP, SIGXCPU};
#define N_SIGNALS (sizeof SIGNALS / sizeof SIGNALS[0])
static struct sigaction old_actions[65];
static int installed[65];

static void on_signal(int sig, siginfo_t *info, void *context) {
  int saved_errno = errno;
  struct sigaction old = old_actions[sig];
  int handled = (old.sa_flags & SA_SIGINFO) ||
                (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN);
  if (recording && getpid() == owner_pid && !__atomic_load_n(&finalized, __ATOMIC_ACQUIRE) &&
      claim_conversion()) {
    enum ending how = handled ? END_HANDED_OVER : END_KILLED;
    uint64_t kept = 0;
    int rc = write_trace(how, sig, &kept);
    if (!handled) {
      __atomic_store_n(&finalized, 1, __ATOMIC_RELEASE);
      char line[6000];
      sink_t o = {.fd = 2, .buf = line, .cap = sizeof line};
      put_str(&o, "eopt kokkos connector: ");
      if (rc == 0) {
        unlinkat(dir_fd, RECORDS_FILE, 0);
        put_message(&o, how, sig, kept, 0);
        put_str(&o, " in ");
        put_str(&o, out_dir);
        put_str(&o, "/events.csv\n");
      } else {
        put_str(&o, "the program was killed by ");
        put_str(&o, signal_name(sig));
        put_str(&o, "; events.csv could not be written: the events stay in ");
        put_str(&o, out_dir);
        put_str(&o, "/" RECORDS_FILE ", which eopt reads\n");
      }
      sink_flush(&o);
    }
    release_conversion();
  }
  if (handled) {
    if (old.sa_flags & SA_RESETHAND) { /* what the kernel would have done for it */
      old_actions[sig].sa_handler = SIG_DFL;
      old_actions[sig].sa_flags = 0;
    }
    errno = saved_errno;
    if (old.sa_flags & SA_SIGINFO)
      old.sa_sigaction(sig, info, context);
    else
      old.sa_handler(sig);
    return;
  }
  /* the default action, so the exit status (and any core) says what it always did */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  raise(sig);
  errno = saved_errno;
}

static void install_signal_handlers(void) {
  stack_t current;
  if (sigaltstack(NULL, &current) == 0 && (current.ss_flags & SS_DISABLE)) {
    /* a crash from a stack overflow needs another stack to run the handler on */
    void *mem = raw_alloc(ALT_STACK_BYTES);
    if (mem) {
      stack_t alt = {.ss_sp = mem, .ss_flags = 0, .ss_size = ALT_STACK_BYTES};
      sigaltstack(&alt, NULL);
    }
  }
  for (size_t i = 0; i < N_SIGNALS; ++i) {
    int sig = SIGNALS[i];
    struct sigaction old, act;
    if (sigaction(sig, NULL, &old) != 0) continue;
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue; /* nohup & co */
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_signal;
    act.sa_mask = old.sa_mask;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK | (old.sa_flags & SA_RESTART);
    old_actions[sig] = old;
    if (sigaction(sig, &act, NULL) == 0) installed[sig] = 1;
  }
}

/* After finalize there is nothing left to save: the handlers still ours are given back. */
static void restore_signal_handlers(void) {
  for (size_t i = 0; i < N_SIGNALS; ++i) {
    int sig = SIGNALS[i];
    struct sigaction current;
    if (!installed[sig] || sigaction(sig, NULL, &current) != 0) continue;
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_signal)
      sigaction(sig, &old_actions[sig], NULL);
    installed[sig] = 0;
  }
}

/* Start and end ---------------------------------------------------------------------------- */
static void finalize_at_exit(void);
static pthread_t flusher;
static pthread_mutex_t flusher_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t flusher_wake = PTHREAD_COND_INITIALIZER;
static int flusher_running, flusher_stop;

/* Every 10 ms, every thread's new records go to the file. Signals are blocked here: the
 * program's threads handle them, as they would without the connector. */
static void *flusher_main(void *arg) {
  (void)arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  pthread_mutex_lock(&flusher_lock);
  while (!flusher_stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)FLUSH_NS;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec += 1;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&flusher_wake, &flusher_lock, &until);
    if (flusher_stop) break;
    pthread_mutex_unlock(&flusher_lock);
    uint64_t t = now_ns();
    uint32_t nt = __atomic_load_n(&n_threads, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < nt; ++i) flush_thread(threads[i], t, 0);
    pthread_mutex_lock(&flusher_lock);
  }
  pthread_mutex_unlock(&flusher_lock);
  return NULL;
}

static void stop_flusher(void) {
  if (!flusher_running) return;
  pthread_mutex_lock(&flusher_lock);
  flusher_stop = 1;
  pthread_cond_signal(&flusher_wake);
  pthread_mutex_unlock(&flusher_lock);
  pthread_join(flusher, NULL);
  flusher_running = 0;
}

/* A forked child must not write into its parent's trace. */
static void in_forked_child(void) { __atomic_store_n(&finalized, 1, __ATOMIC_RELEASE); }

static void start_recording(void) {
  owner_pid = getpid();
  fill_digit_table();
  const char *fences = getenv("EOPT_KOKKOS_FENCES");
  record_fences = !(fences && strcmp(fences, "0") == 0);
  start_unix_ns = now_ns();
  gethostname(host, sizeof host - 1);
  const char *dir = getenv("EOPT_KOKKOS_TRACE_DIR");
  if (!dir || !*dir) dir = "eopt-kokkos-trace";
  rank = mpi_rank();
  /* an absolute path: messages stay right if the program changes its directory */
  char cwd[2048] = "";
  if (dir[0] != '/' && !getcwd(cwd, sizeof cwd)) cwd[0] = 0;
  snprintf(out_dir, sizeof out_dir, "%s%s%s", cwd, cwd[0] ? "/" : "", dir);
  if (rank >= 0) {
    size_t n = strlen(out_dir);
    snprintf(out_dir + n, sizeof out_dir - n, "/rank_%d", rank);
  }
  const char *failed = "events.csv";
  int err = 0;
  if (mkdir_p(out_dir) == 0) dir_fd = open(out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    /* the header first, so the folder shows the run's file from its start */
    int fd = openat(dir_fd, "events.csv", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    static const char header[] = "id,parent_id,name,category,start_ns,end_ns,device_id\n";
    if (fd >= 0 && write_all(fd, header, sizeof header - 1) == 0 && close(fd) == 0) {
      failed = RECORDS_FILE;
      rec_fd = openat(dir_fd, RECORDS_FILE, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    }
  }
  err = errno;
  if (rec_fd >= 0) {
    file_header_t head = {.magic = "EOPTKKR1",
                          .version = 1,
                          .record_bytes = sizeof(record_t),
                          .block_header_bytes = sizeof(block_header_t),
                          .first_block = FILE_HEADER_BYTES,
                          .start_unix_ns = start_unix_ns,
                          .pid = (int32_t)owner_pid,
                          .rank = rank};
    if (pwrite(rec_fd, &head, sizeof head, 0) != (ssize_t)sizeof head) {
      err = errno;
      close(rec_fd);
      rec_fd = -1;
    }
  }
  if (rec_fd < 0) {
    fprintf(stderr,
            "eopt kokkos connector: cannot write %s/%s (%s); events are not recorded (set "
            "EOPT_KOKKOS_TRACE_DIR to a writable folder)\n",
            out_dir, failed, strerror(err));
  } else {
    file_end = FILE_HEADER_BYTES;
    pthread_key_create(&thread_key, thread_end);
    if (pthread_create(&flusher, NULL, flusher_main, NULL) == 0) flusher_running = 1;
    pthread_atfork(NULL, NULL, in_forked_child);
    install_signal_handlers();
    atexit(finalize_at_exit);
    recording = 1;
  }
  __atomic_store_n(&started, 1, __ATOMIC_RELEASE);
}

static void finish(enum ending how) {
  ensure_started();
  if (!recording || getpid() != owner_pid || !claim_conversion()) return;
  if (__atomic_load_n(&finalized, __ATOMIC_ACQUIRE)) {
    release_conversion();
    return;
  }
  uint64_t t = now_ns();
  tstate_t *s = tls;
  if (s && !s->dead) close_all(s, t);
  __atomic_store_n(&finalized, 1, __ATOMIC_SEQ_CST);
  wait_for_ending_threads();
  stop_flusher(); /* what it has not written, the conversion reads from the rings */
  if (write_trace(how, 0, NULL) == 0) {
    unlinkat(dir_fd, RECORDS_FILE, 0);
  } else {
    fprintf(stderr,
            "eopt kokkos connector: cannot write %s/events.csv (%s); the events stay in "
            "%s/%s, which eopt reads\n",
            out_dir, strerror(errno), out_dir, RECORDS_FILE);
  }
  release_conversion();
  restore_signal_handlers();
}

/* An application that exits without Kokkos::finalize still leaves its events on disk. */
static void finalize_at_exit(void) {
  if (!__atomic_load_n(&finalized, __ATOMIC_ACQUIRE)) finish(END_EXIT);
}

/* The Kokkos Tools C interface ------------------------------------------------------------ */
void kokkosp_init_library(const int loadSeq, const uint64_t interfaceVer,
                          const uint32_t devInfoCount,
                          struct Kokkos_Profiling_KokkosPDeviceInfo *deviceInfo) {
  ensure_started();
  load_seq = loadSeq;
  kokkos_interface_version = interfaceVer;
  n_devices = devInfoCount < MAX_DEVICES ? devInfoCount : MAX_DEVICES;
  for (uint32_t i = 0; i < n_devices && deviceInfo; ++i) devices[i] = deviceInfo[i].deviceID;
}

void kokkosp_finalize_library(void) { finish(END_FINALIZE); }

void kokkosp_push_profile_region(const char *name) { open_event(name, USER_REGION, 0); }

void kokkosp_pop_profile_region(void) {
  tstate_t *s = tls;
  if (s && s->skipped_regions) {
    s->skipped_regions--;
    return;
  }
  if (!close_event(0, USER_REGION)) count(&n_unmatched_pop);
}

static inline void begin_kernel(const char *name, uint32_t dev, uint64_t *kid, uint8_t category) {
  uint64_t id = open_event(name, category, dev);
  if (kid) *kid = id;
}

static inline void end_kernel(uint64_t kid) {
  if (!close_event(kid, 255)) count(&n_unmatched_end);
}

void kokkosp_begin_parallel_for(const char *name, const uint32_t devID, uint64_t *kID) {
  begin_kernel(name, devID, kID, PARALLEL_FOR);
}
void kokkosp_end_parallel_for(const uint64_t kID) { end_kernel(kID); }
void kokkosp_begin_parallel_reduce(const char *name, const uint32_t devID, uint64_t *kID) {
  begin_kernel(name, devID, kID, PARALLEL_REDUCE);
}
void kokkosp_end_parallel_reduce(const uint64_t kID) { end_kernel(kID); }
void kokkosp_begin_parallel_scan(const char *name, const uint32_t devID, uint64_t *kID) {
  begin_kernel(name, devID, kID, PARALLEL_SCAN);
}
void kokkosp_end_parallel_scan(const uint64_t kID) { end_kernel(kID); }

void kokkosp_begin_fence(const char *name, const uint32_t devID, uint64_t *handle) {
  ensure_started();
  if (!record_fences) {
    if (handle) *handle = 0;
    return;
  }
  begin_kernel(name, devID, handle, FENCE);
}
void kokkosp_end_fence(const uint64_t handle) {
  if (!record_fences || handle == 0) return;
  end_kernel(handle);
}

void kokkosp_begin_deep_copy(struct Kokkos_Profiling_SpaceHandle dst_handle, const char *dst_name,
                             const void *dst_ptr, struct Kokkos_Profiling_SpaceHandle src_handle,
                             const char *src_name, const void *src_ptr, uint64_t size) {
  (void)dst_ptr;
  (void)src_ptr;
  (void)size;
  tstate_t *s = state();
  const char *dn = dst_name ? dst_name : "", *sn = src_name ? src_name : "";
  size_t dl = strlen(dn), sl = strlen(sn);
  size_t dhl = strnlen(dst_handle.name, 64), shl = strnlen(src_handle.name, 64);
  size_t need = dl + sl + dhl + shl + 12;
  if (s && !s->dead && need > s->scratch_cap) {
    char *grown = realloc(s->scratch, need);
    if (grown) {
      s->scratch = grown;
      s->scratch_cap = need;
    }
  }
  if (!s || s->dead || need > s->scratch_cap) {
    open_event("", DEEP_COPY, 0); /* counted as lost, or kept without its name */
    return;
  }
  /* "dst (Space) <- src (Space)", whole */
  char *p = s->scratch;
  memcpy(p, dn, dl);
  p += dl;
  memcpy(p, " (", 2);
  p += 2;
  memcpy(p, dst_handle.name, dhl);
  p += dhl;
  memcpy(p, ") <- ", 5);
  p += 5;
  memcpy(p, sn, sl);
  p += sl;
  memcpy(p, " (", 2);
  p += 2;
  memcpy(p, src_handle.name, shl);
  p += shl;
  *p++ = ')';
  *p = 0;
  open_event(s->scratch, DEEP_COPY, 0);
}

void kokkosp_end_deep_copy(void) {
  if (!close_event(0, DEEP_COPY)) count(&n_unmatched_end);
}
