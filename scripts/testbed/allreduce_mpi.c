/* A data-parallel training loop for the real-traffic test bed, on OpenMPI: each step computes (naive matrix
 * products sized by time) and all-reduces a gradient of --bytes bytes, either at once (MPI_Allreduce after the
 * compute) or, with --buckets B > 1, as DDP does: B buckets, each all-reduced without blocking (MPI_Iallreduce)
 * as soon as its slice of the "backward" compute is done, while the rest of the compute goes on.
 *
 * The truth: one JSON line per step to <--truth>-rank<R>.jsonl, with the step's wall-clock edges (CLOCK_REALTIME, ns), the
 * all-reduce's duration, and the kernel's counters at each edge (`/sys/class/net/{fab0,mgmt0}/statistics/
 * {tx,rx}_bytes` of this node's network namespace, and TCP RetransSegs from /proc/net/snmp).
 *
 * Optional step markers (--markers): the commwatch_steps wire format over loopback UDP (127.0.0.1:9473),
 * job from COMMWATCH_JOB.
 *
 * Build: mpicc -O2 -o allreduce_mpi allreduce_mpi.c */
#include <arpa/inet.h>
#include <mpi.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAT 96

struct counters {
    long long fab_tx, fab_rx, mgmt_tx, mgmt_rx, retrans;
};

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A counter file's value, or -1 when it cannot be read (the truth says so rather than guessing). */
/* qsort's order of doubles, ascending. */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long long read_counter(const char *iface, const char *name) {
    char path[256];
    snprintf(path, sizeof path, "/sys/class/net/%s/statistics/%s", iface, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

/* TCP RetransSegs of this network namespace (/proc/net/snmp: a "Tcp:" header line, then a "Tcp:" values
 * line), or -1. */
static long long read_retrans(void) {
    FILE *f = fopen("/proc/net/snmp", "r");
    if (!f) return -1;
    char head[2048], vals[2048];
    long long result = -1;
    while (fgets(head, sizeof head, f)) {
        if (strncmp(head, "Tcp:", 4) != 0) continue;
        if (!fgets(vals, sizeof vals, f)) break;
        char *hs, *vs;
        char *h = strtok_r(head, " \n", &hs);
        char *v = strtok_r(vals, " \n", &vs);
        while (h && v) {
            if (strcmp(h, "RetransSegs") == 0) {
                result = atoll(v);
                break;
            }
            h = strtok_r(NULL, " \n", &hs);
            v = strtok_r(NULL, " \n", &vs);
        }
        break;
    }
    fclose(f);
    return result;
}

static void read_counters(struct counters *c) {
    c->fab_tx = read_counter("fab0", "tx_bytes");
    c->fab_rx = read_counter("fab0", "rx_bytes");
    c->mgmt_tx = read_counter("mgmt0", "tx_bytes");
    c->mgmt_rx = read_counter("mgmt0", "rx_bytes");
    c->retrans = read_retrans();
}

static void print_counters(FILE *f, const char *key, const struct counters *c) {
    fprintf(f, "\"%s\":{\"fab0_tx\":%lld,\"fab0_rx\":%lld,\"mgmt0_tx\":%lld,\"mgmt0_rx\":%lld,\"retrans\":%lld}", key,
            c->fab_tx, c->fab_rx, c->mgmt_tx, c->mgmt_rx, c->retrans);
}

static float A[MAT * MAT], B[MAT * MAT], C[MAT * MAT];

/* One unit of compute: a naive MAT x MAT matrix product. */
static void compute_unit(void) {
    for (int i = 0; i < MAT; i++)
        for (int k = 0; k < MAT; k++) {
            float a = A[i * MAT + k];
            for (int j = 0; j < MAT; j++) C[i * MAT + j] += a * B[k * MAT + j];
        }
    A[0] = C[1] * 1e-9f; /* keep the work observable */
}

static int udp_fd = -1;
static struct sockaddr_in udp_to;

static void marker(const char *job, int rank, int step, const char *phase) {
    if (udp_fd < 0) return;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "{\"job\":\"%s\",\"rank\":%d,\"step\":%d,\"phase\":\"%s\",\"time\":%.6f}", job,
                     rank, step, phase, now_ns() / 1e9);
    if (n > 0 && n < (int)sizeof buf) sendto(udp_fd, buf, n, MSG_DONTWAIT, (struct sockaddr *)&udp_to, sizeof udp_to);
}

static void usage(void) {
    fprintf(stderr,
            "usage: allreduce_mpi --bytes N --compute-ms MS --steps S --truth FILE [--buckets B] [--job ID] "
            "[--markers]\n");
}

int main(int argc, char **argv) {
    long long bytes = 32LL << 20;
    double compute_ms = 400;
    int steps = 20, buckets = 1, markers = 0;
    const char *truth = NULL;
    const char *job = getenv("COMMWATCH_JOB") ? getenv("COMMWATCH_JOB") : "mpi";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes") && i + 1 < argc) bytes = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--compute-ms") && i + 1 < argc) compute_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--buckets") && i + 1 < argc) buckets = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--truth") && i + 1 < argc) truth = argv[++i];
        else if (!strcmp(argv[i], "--job") && i + 1 < argc) job = argv[++i];
        else if (!strcmp(argv[i], "--markers")) markers = 1;
        else {
            usage();
            return 2;
        }
    }
    if (!truth || bytes < 4 || steps < 1 || buckets < 1 || compute_ms < 0) {
        usage();
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    char host[256] = "";
    gethostname(host, sizeof host - 1);

    char path[4096];
    snprintf(path, sizeof path, "%s-rank%d.jsonl", truth, rank);
    FILE *out = fopen(path, "w");
    if (!out) {
        fprintf(stderr, "allreduce_mpi: cannot write %s\n", path);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (markers) {
        udp_fd = socket(AF_INET, SOCK_DGRAM, 0);
        memset(&udp_to, 0, sizeof udp_to);
        udp_to.sin_family = AF_INET;
        udp_to.sin_port = htons(9473);
        udp_to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    for (int i = 0; i < MAT * MAT; i++) {
        A[i] = (float)(i % 7) * 0.01f;
        B[i] = (float)(i % 5) * 0.02f;
    }
    /* Calibrate the compute unit under the same sharing of cores as the loop (all ranks at once, over at least
     * 0.3 s); every rank takes the median rank's figure so the ranks do the same work. Not the slowest: one rank
     * starved of CPU while it calibrates would read a unit many times its cost in the loop and leave the job
     * with almost no compute (a step all communication). */
    for (int i = 0; i < 20; i++) compute_unit(); /* warm-up */
    MPI_Barrier(MPI_COMM_WORLD);
    long long t0 = now_ns();
    long n = 0;
    while (n < 20 || now_ns() - t0 < 300000000LL) {
        compute_unit();
        n++;
    }
    double unit_ms = (now_ns() - t0) / 1e6 / (double)n;
    double *all_ms = malloc((size_t)world * sizeof(double));
    if (!all_ms) {
        fprintf(stderr, "allreduce_mpi: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Allgather(&unit_ms, 1, MPI_DOUBLE, all_ms, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    qsort(all_ms, (size_t)world, sizeof(double), cmp_double);
    double median_ms = all_ms[world / 2];
    free(all_ms);
    long units = (long)(compute_ms / median_ms + 0.5);
    if (units < buckets * 2) units = buckets * 2;

    size_t count = (size_t)(bytes / 4);
    float *grad = malloc(count * sizeof(float));
    float *sum = malloc(count * sizeof(float));
    if (!grad || !sum) MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t i = 0; i < count; i++) grad[i] = 1.0f;
    MPI_Request *reqs = calloc((size_t)buckets, sizeof(MPI_Request));

    MPI_Barrier(MPI_COMM_WORLD);
    for (int s = 0; s < steps; s++) {
        struct counters c0, c1, cc;
        read_counters(&c0);
        long long start = now_ns();
        marker(job, rank, s, "begin");
        long long comm_start, comm_end;
        if (buckets == 1) {
            for (long u = 0; u < units; u++) compute_unit();
            read_counters(&cc);
            comm_start = now_ns();
            MPI_Allreduce(grad, sum, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            comm_end = now_ns();
        } else {
            /* Forward: half the units; backward: the other half in `buckets` slices, bucket b all-reduced
             * without blocking once slice b is done (the last gradients first, as DDP does). */
            long fwd = units / 2, per = (units - fwd) / buckets;
            for (long u = 0; u < fwd; u++) compute_unit();
            read_counters(&cc);
            comm_start = 0;
            size_t per_bucket = count / (size_t)buckets;
            for (int b = 0; b < buckets; b++) {
                for (long u = 0; u < per; u++) {
                    compute_unit();
                    int done;
                    if (b > 0) MPI_Testall(b, reqs, &done, MPI_STATUSES_IGNORE);
                }
                size_t off = (size_t)b * per_bucket;
                size_t n = b == buckets - 1 ? count - off : per_bucket;
                if (!comm_start) comm_start = now_ns();
                MPI_Iallreduce(grad + off, sum + off, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &reqs[b]);
            }
            MPI_Waitall(buckets, reqs, MPI_STATUSES_IGNORE);
            comm_end = now_ns();
        }
        long long end = now_ns();
        read_counters(&c1);
        marker(job, rank, s, "end");
        fprintf(out,
                "{\"lib\":\"mpi\",\"job\":\"%s\",\"rank\":%d,\"world\":%d,\"node\":\"%s\",\"step\":%d,"
                "\"bytes\":%lld,\"buckets\":%d,\"start_ns\":%lld,\"comm_start_ns\":%lld,\"end_ns\":%lld,"
                "\"allreduce_ns\":%lld,",
                job, rank, world, host, s, bytes, buckets, start, comm_start, end, comm_end - comm_start);
        print_counters(out, "edge_start", &c0);
        fputc(',', out);
        print_counters(out, "edge_comm", &cc);
        fputc(',', out);
        print_counters(out, "edge_end", &c1);
        fputs("}\n", out);
        fflush(out);
    }
    fclose(out);
    free(grad);
    free(sum);
    free(reqs);
    MPI_Finalize();
    return 0;
}
