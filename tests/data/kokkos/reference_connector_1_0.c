/*
 * The 1.0 connector, frozen: the reference for the layout of events.csv. The tests run it
 * and the current connector on the same programs and compare what they write, field by
 * field (timestamps aside), so the files users get stay byte-compatible.
 */
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
 * The callbacks never block on I/O: each completed event goes into an in-memory chunk
 * (a short critical section), and a writer thread formats and writes full chunks. Bad
 * orders (pop without push, end without begin) are counted in metadata.json, never fatal.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EOPT_CONNECTOR_VERSION "1.0"
#define CHUNK_RECORDS 4096
#define MAX_DEPTH 512
#define MAX_DEVICES 64

enum category { USER_REGION, PARALLEL_FOR, PARALLEL_REDUCE, PARALLEL_SCAN, DEEP_COPY, FENCE };
static const char *const CATEGORY_NAMES[] = {"USER_REGION",   "PARALLEL_FOR", "PARALLEL_REDUCE",
                                             "PARALLEL_SCAN", "DEEP_COPY",    "FENCE"};

struct Kokkos_Profiling_KokkosPDeviceInfo {
  size_t deviceID;
};
struct Kokkos_Profiling_SpaceHandle {
  char name[64];
};

typedef struct {
  uint64_t id, parent, start_ns, end_ns;
  uint32_t device;
  uint8_t category;
  char *name;
} record_t;

typedef struct chunk {
  struct chunk *next;
  size_t used;
  record_t records[CHUNK_RECORDS];
} chunk_t;

typedef struct {
  uint64_t id, parent, start_ns;
  uint32_t device;
  uint8_t category;
  char *name;
} frame_t;

/* Per-thread stack of open events: nesting without any shared lock. */
static __thread frame_t tls_stack[MAX_DEPTH];
static __thread int tls_depth;

static pthread_mutex_t buffer_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t writer_wake = PTHREAD_COND_INITIALIZER;
static chunk_t *current_chunk;
static chunk_t *full_head, *full_tail;
static pthread_t writer_thread;
static int writer_running, writer_stop, started, finalized, record_fences = 1;
static pthread_once_t start_once = PTHREAD_ONCE_INIT;

static uint64_t next_id;
static uint64_t n_events, n_unclosed, n_unmatched_pop, n_unmatched_end, n_too_deep, n_lost;
static uint64_t start_unix_ns, kokkos_interface_version;
static int load_seq, rank = -1;
static uint32_t n_devices;
static size_t devices[MAX_DEVICES];
static char out_dir[4096];
static FILE *events_file;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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

static void write_csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\n\r")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; ++s) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static void write_chunk(chunk_t *c) {
  for (size_t i = 0; i < c->used; ++i) {
    record_t *r = &c->records[i];
    if (events_file) {
      fprintf(events_file, "%llu,%llu,", (unsigned long long)r->id, (unsigned long long)r->parent);
      write_csv_field(events_file, r->name ? r->name : "");
      fprintf(events_file, ",%s,%llu,%llu,%u\n", CATEGORY_NAMES[r->category],
              (unsigned long long)r->start_ns, (unsigned long long)r->end_ns, r->device);
    }
    free(r->name);
  }
  if (events_file) fflush(events_file);
}

/* Takes the full chunks (and, when `all`, the current one) out of the buffer. */
static chunk_t *take_chunks(int all) {
  chunk_t *list = full_head;
  full_head = full_tail = NULL;
  if (all && current_chunk && current_chunk->used) {
    current_chunk->next = NULL;
    if (list) {
      chunk_t *t = list;
      while (t->next) t = t->next;
      t->next = current_chunk;
    } else {
      list = current_chunk;
    }
    current_chunk = NULL;
  }
  return list;
}

static void write_and_free(chunk_t *list) {
  while (list) {
    chunk_t *next = list->next;
    write_chunk(list);
    free(list);
    list = next;
  }
}

static void *writer_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&buffer_lock);
  while (!writer_stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 50 * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec += 1;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&writer_wake, &buffer_lock, &until);
    chunk_t *list = take_chunks(0);
    pthread_mutex_unlock(&buffer_lock);
    write_and_free(list); /* formatting and I/O happen outside the lock */
    pthread_mutex_lock(&buffer_lock);
  }
  pthread_mutex_unlock(&buffer_lock);
  return NULL;
}

static void finalize_at_exit(void);

static void start_recording(void) {
  const char *fences = getenv("EOPT_KOKKOS_FENCES");
  record_fences = !(fences && strcmp(fences, "0") == 0);
  start_unix_ns = now_ns();
  const char *dir = getenv("EOPT_KOKKOS_TRACE_DIR");
  if (!dir || !*dir) dir = "eopt-kokkos-trace";
  rank = mpi_rank();
  if (rank >= 0)
    snprintf(out_dir, sizeof out_dir, "%s/rank_%d", dir, rank);
  else
    snprintf(out_dir, sizeof out_dir, "%s", dir);
  char path[4200];
  if (mkdir_p(out_dir) == 0) {
    snprintf(path, sizeof path, "%s/events.csv", out_dir);
    events_file = fopen(path, "w");
  }
  if (!events_file) {
    fprintf(stderr, "eopt kokkos connector: cannot write %s/events.csv (%s); events are not "
            "recorded (set EOPT_KOKKOS_TRACE_DIR to a writable folder)\n", out_dir,
            strerror(errno));
  } else {
    fputs("id,parent_id,name,category,start_ns,end_ns,device_id\n", events_file);
    fflush(events_file);
  }
  if (pthread_create(&writer_thread, NULL, writer_main, NULL) == 0) writer_running = 1;
  atexit(finalize_at_exit);
  started = 1;
}

void kokkosp_finalize_library(void);

/* An application that exits without Kokkos::finalize still leaves its events on disk. */
static void finalize_at_exit(void) {
  if (!finalized) kokkosp_finalize_library();
}

static inline void ensure_started(void) {
  if (__builtin_expect(!started, 0)) pthread_once(&start_once, start_recording);
}

static void push_record(const frame_t *f, uint64_t end_ns) {
  pthread_mutex_lock(&buffer_lock);
  if (finalized) { /* a callback after finalize: keep nothing, crash nothing */
    pthread_mutex_unlock(&buffer_lock);
    free(f->name);
    __atomic_add_fetch(&n_lost, 1, __ATOMIC_RELAXED);
    return;
  }
  if (!current_chunk || current_chunk->used == CHUNK_RECORDS) {
    if (current_chunk) {
      current_chunk->next = NULL;
      if (full_tail)
        full_tail->next = current_chunk;
      else
        full_head = current_chunk;
      full_tail = current_chunk;
      pthread_cond_signal(&writer_wake);
    }
    current_chunk = malloc(sizeof(chunk_t));
    if (!current_chunk) {
      pthread_mutex_unlock(&buffer_lock);
      free(f->name);
      __atomic_add_fetch(&n_lost, 1, __ATOMIC_RELAXED);
      return;
    }
    current_chunk->used = 0;
    current_chunk->next = NULL;
  }
  record_t *r = &current_chunk->records[current_chunk->used++];
  r->id = f->id;
  r->parent = f->parent;
  r->start_ns = f->start_ns;
  r->end_ns = end_ns;
  r->device = f->device;
  r->category = f->category;
  r->name = f->name;
  n_events++;
  pthread_mutex_unlock(&buffer_lock);
}

static uint64_t open_event(const char *name, uint8_t category, uint32_t device) {
  ensure_started();
  uint64_t t = now_ns();
  uint64_t id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
  if (tls_depth >= MAX_DEPTH) {
    __atomic_add_fetch(&n_too_deep, 1, __ATOMIC_RELAXED);
    return id;
  }
  frame_t *f = &tls_stack[tls_depth++];
  f->id = id;
  f->parent = tls_depth > 1 ? tls_stack[tls_depth - 2].id : 0;
  f->start_ns = t;
  f->device = device;
  f->category = category;
  f->name = strdup(name ? name : "");
  return id;
}

/* Closes the innermost open event matching `id` (any id when 0) and `category` (any when
 * 255). Events opened after it on this thread stay open. Returns 0 when none matched. */
static int close_event(uint64_t id, uint8_t category) {
  uint64_t t = now_ns();
  for (int i = tls_depth - 1; i >= 0; --i) {
    frame_t *f = &tls_stack[i];
    if ((id == 0 || f->id == id) && (category == 255 || f->category == category)) {
      frame_t done = *f;
      memmove(&tls_stack[i], &tls_stack[i + 1], (size_t)(tls_depth - i - 1) * sizeof(frame_t));
      tls_depth--;
      /* Children opened inside it keep their recorded parent. */
      push_record(&done, t);
      return 1;
    }
  }
  return 0;
}

/* The Kokkos Tools C interface ------------------------------------------------------- */
void kokkosp_init_library(const int loadSeq, const uint64_t interfaceVer,
                          const uint32_t devInfoCount,
                          struct Kokkos_Profiling_KokkosPDeviceInfo *deviceInfo) {
  ensure_started();
  load_seq = loadSeq;
  kokkos_interface_version = interfaceVer;
  n_devices = devInfoCount < MAX_DEVICES ? devInfoCount : MAX_DEVICES;
  for (uint32_t i = 0; i < n_devices && deviceInfo; ++i) devices[i] = deviceInfo[i].deviceID;
}

void kokkosp_finalize_library(void) {
  ensure_started();
  uint64_t t = now_ns();
  /* Events still open on this thread end here, and are counted as unclosed. */
  while (tls_depth > 0) {
    frame_t done = tls_stack[--tls_depth];
    push_record(&done, t);
    n_unclosed++;
  }
  pthread_mutex_lock(&buffer_lock);
  if (finalized) {
    pthread_mutex_unlock(&buffer_lock);
    return;
  }
  writer_stop = 1;
  pthread_cond_signal(&writer_wake);
  pthread_mutex_unlock(&buffer_lock);
  if (writer_running) pthread_join(writer_thread, NULL);
  writer_running = 0;
  pthread_mutex_lock(&buffer_lock);
  finalized = 1;
  chunk_t *list = take_chunks(1);
  pthread_mutex_unlock(&buffer_lock);
  write_and_free(list);
  if (events_file) {
    fclose(events_file);
    events_file = NULL;
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/metadata.json", out_dir);
  FILE *m = fopen(path, "w");
  if (!m) return;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  fprintf(m,
          "{\n  \"format\": \"energy-dashboard-for-kokkos\",\n  \"version\": 1,\n"
          "  \"recorded_by\": \"eopt kokkos connector %s\",\n  \"pid\": %d,\n"
          "  \"rank\": %d,\n  \"host\": \"",
          EOPT_CONNECTOR_VERSION, (int)getpid(), rank);
  for (const char *c = host; *c; ++c)
    if (*c != '"' && *c != '\\') fputc(*c, m);
  fprintf(m,
          "\",\n  \"start_unix_ns\": %llu,\n  \"end_unix_ns\": %llu,\n"
          "  \"kokkos_interface_version\": %llu,\n  \"load_sequence\": %d,\n"
          "  \"fences_recorded\": %s,\n  \"kokkos_devices\": [",
          (unsigned long long)start_unix_ns, (unsigned long long)t,
          (unsigned long long)kokkos_interface_version, load_seq,
          record_fences ? "true" : "false");
  for (uint32_t i = 0; i < n_devices; ++i)
    fprintf(m, "%s%zu", i ? ", " : "", devices[i]);
  fprintf(m,
          "],\n  \"counts\": {\"events\": %llu, \"unclosed\": %llu, \"pop_without_push\": "
          "%llu, \"end_without_begin\": %llu, \"too_deep\": %llu, \"lost\": %llu}\n}\n",
          (unsigned long long)n_events, (unsigned long long)n_unclosed,
          (unsigned long long)n_unmatched_pop, (unsigned long long)n_unmatched_end,
          (unsigned long long)n_too_deep, (unsigned long long)n_lost);
  fclose(m);
}

void kokkosp_push_profile_region(const char *name) { open_event(name, USER_REGION, 0); }

void kokkosp_pop_profile_region(void) {
  ensure_started();
  if (!close_event(0, USER_REGION)) __atomic_add_fetch(&n_unmatched_pop, 1, __ATOMIC_RELAXED);
}

static void begin_kernel(const char *name, uint32_t dev, uint64_t *kid, uint8_t category) {
  uint64_t id = open_event(name, category, dev);
  if (kid) *kid = id;
}

static void end_kernel(uint64_t kid) {
  ensure_started();
  if (!close_event(kid, 255)) __atomic_add_fetch(&n_unmatched_end, 1, __ATOMIC_RELAXED);
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
  char name[512];
  snprintf(name, sizeof name, "%s (%.64s) <- %s (%.64s)", dst_name ? dst_name : "",
           dst_handle.name, src_name ? src_name : "", src_handle.name);
  open_event(name, DEEP_COPY, 0);
}

void kokkosp_end_deep_copy(void) {
  ensure_started();
  if (!close_event(0, DEEP_COPY)) __atomic_add_fetch(&n_unmatched_end, 1, __ATOMIC_RELAXED);
}
