/* Every kernel set this CPU runs against the scalar twin (and the scalar twin against the double
 * reference), on odd shapes in every dtype; the thread pool splits rows without changing a bit;
 * the quantizer round-trips within half a step. */
#include "forge/forge.h"
#include "format/w8.h"
#include "kernels/kernels.h"
#include "kernels/kv.h"
#include "kernels/q8.h"
#include "model/ops.h"
#include "testlib.h"
#include "util/half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 12345;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / 16777216.0 * 2.0 - 1.0);
}

typedef struct {
    qhx_tensor t;
    void *data;
    float *scale;
    float *dense; /* the exact fp32 values W[r][c] */
} matrix;

static matrix make(qhx_dtype dt, int rows, int cols) {
    matrix m = {{dt, rows, cols, NULL, NULL}, NULL, NULL, NULL};
    const size_t n = (size_t)rows * cols;
    m.data = calloc(dt == QHX_I8   ? qhx_w8_bytes((uint64_t)rows, (uint64_t)cols)
                    : dt == QHX_Q4 ? qhx_w4_bytes((uint64_t)rows, (uint64_t)cols)
                                   : n * qhx_dtype_size(dt), 1);
    if (dt == QHX_Q4) { /* random codes, and a scale a block from 0.005 to 0.02 */
        uint8_t q[QHX_W4_BLOCK];
        for (int r = 0; r < rows; r++)
            for (int c0 = 0; c0 < cols; c0 += QHX_W4_BLOCK) {
                const float d = qhx_f16_to_f32(qhx_f32_to_f16(0.0125f + 0.0075f * frand()));
                for (int k = 0; k < QHX_W4_BLOCK; k++) q[k] = c0 + k < cols ? (uint8_t)((frand() + 1) * 8) & 15 : 8;
                qhx_w4_put(m.data, (size_t)cols, (size_t)r, (size_t)c0 / QHX_W4_BLOCK, q, d);
            }
        m.dense = malloc(n * sizeof(float));
        m.scale = NULL;
        for (int r = 0; r < rows; r++) qhx_w4_row_f32(m.data, (size_t)cols, (size_t)r, m.dense + (size_t)r * cols);
        m.t.data = m.data;
        return m;
    }
    int8_t *plain = malloc((size_t)cols); /* an I8 row before it is packed */
    m.dense = malloc(n * sizeof(float));
    m.scale = malloc(sizeof(float) * (size_t)rows);
    for (int r = 0; r < rows; r++) {
        m.scale[r] = 0.01f + 0.001f * (float)(r % 7);
        for (int c = 0; c < cols; c++) {
            const size_t i = (size_t)r * cols + c;
            const float v = frand();
            switch (dt) {
            case QHX_I8: plain[c] = (int8_t)lrintf(v * 127); m.dense[i] = plain[c] * m.scale[r]; break;
            case QHX_F16: ((uint16_t *)m.data)[i] = qhx_f32_to_f16(v); m.dense[i] = qhx_f16_to_f32(((uint16_t *)m.data)[i]); break;
            case QHX_BF16: ((uint16_t *)m.data)[i] = qhx_f32_to_bf16(v); m.dense[i] = qhx_bf16_to_f32(((uint16_t *)m.data)[i]); break;
            default: ((float *)m.data)[i] = v; m.dense[i] = v;
            }
        }
        if (dt == QHX_I8) qhx_w8_put_row(m.data, (size_t)cols, (size_t)r, plain);
    }
    free(plain);
    m.t.data = m.data;
    m.t.scale = dt == QHX_I8 ? m.scale : NULL;
    return m;
}

static void drop(matrix *m) { free(m->data), free(m->scale), free(m->dense); }

static const char *dt_name(qhx_dtype dt) { return dt == QHX_Q4 ? "q4" : dt == QHX_I8 ? "i8" : dt == QHX_F16 ? "f16" : dt == QHX_BF16 ? "bf16" : "f32"; }

/* worst |a - b| / sum_c |W[r][c] x[c]| over all outputs: rounding error relative to the dot's size */
static double compare(const matrix *m, const float *X, int T, const float *a, const float *b) {
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int r = 0; r < m->t.rows; r++) {
            double mag = 1e-30;
            for (int c = 0; c < m->t.cols; c++) mag += fabs((double)m->dense[(size_t)r * m->t.cols + c] * X[(size_t)t * m->t.cols + c]);
            const double d = fabs((double)a[(size_t)t * m->t.rows + r] - b[(size_t)t * m->t.rows + r]) / mag;
            if (!(d <= worst)) worst = d;
        }
    return worst;
}

/* a set whose W8 prefill and decode kernels keep the scalar twin's results exactly: the NEON sets
 * (exact integer block sums, then the twin's fp32 steps one block at a time); the x86 kernels sum
 * blocks in other orders, within the tolerance */
static int w8_exact(const qhx_kernel_set *ks) {
    return ks->matmul_acts && !strncmp(ks->name, "neon", 4);
}

static void report_mode(void *arg, int i, int n) {
    (void)n;
    ((unsigned *)arg)[i] = qhx_fp_mode();
}

/* attend, kv_widen and softmax_tile of every set, each KV form, on odd shapes: against the double
 * oracle (ref) over the same stored rows; rows packed at width 256 (the model's layout, a path of
 * its own) bit for bit what the same rows strided give; widening bit for bit what qhx_kv_at
 * reads; and the stored forms within their rounding of the fp32 rows (f16 2^-11 of each value, q8
 * half a step of a block of 32), so a broken store or scale cannot pass. */
static void attention_tests(const char *const *sets, size_t n_sets) {
    const int T = QHX_ATTEND_TILE, hds[] = {16, 48, 64, 256}, Gs[] = {1, 3, 4, 5}, ns[] = {1, 2, T - 1, T, T + 1, 2 * T + 45}; /* across tiles */
    const qhx_kv_form forms[] = {QHX_KV_F32, QHX_KV_F16, QHX_KV_Q8};
    const qhx_kernel_set *ref = qhx_kernels_find("ref");
    void (*seen[32])(const qhx_attend_args *);
    size_t n_seen = 0;
    for (size_t s = 0; s < n_sets; s++) {
        const qhx_kernel_set *ks = qhx_kernels_find(sets[s]);
        int again = 0; /* the sets of a vector layer share its attention kernels: one run each */
        for (size_t i = 0; ks && i < n_seen; i++) again |= seen[i] == ks->attend;
        if (!ks || again) continue;
        seen[n_seen++] = ks->attend;
        double worst = 0, worst_form[3] = {0};
        int widen_ok = 1, packed_ok = 1, cases = 0;
        for (size_t h = 0; h < sizeof hds / sizeof *hds; h++)
            for (size_t gi = 0; gi < sizeof Gs / sizeof *Gs; gi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                    const int hd = hds[h], G = Gs[gi], n = ns[ni];
                    float *q = malloc(sizeof(float) * G * hd * 2), *K = malloc(sizeof(float) * n * hd), *V = malloc(sizeof(float) * n * hd);
                    for (int i = 0; i < G * hd * 2; i++) q[i] = frand() * 3;
                    for (int i = 0; i < n * hd; i++) K[i] = frand(), V[i] = frand() * (1 + (i % 7)); /* scales differ by block */
                    for (size_t f = 0; f < 3; f++) {
                        const qhx_kv_form form = forms[f];
                        const size_t head = qhx_kv_head_bytes(form, hd), stride = 2 * head + 8; /* a second head beside it */
                        unsigned char *kc = calloc((size_t)n, stride), *vc = calloc((size_t)n, stride);
                        for (int p = 0; p < n; p++) {
                            qhx_kv_store(form, K + (size_t)p * hd, hd, kc + p * stride + head);
                            qhx_kv_store(form, V + (size_t)p * hd, hd, vc + p * stride + head);
                        }
                        float *o = malloc(sizeof(float) * G * hd * 3), *want = o + G * hd, *exact = want + G * hd;
                        float *scratch = malloc(sizeof(float) * G * QHX_ATTEND_TILE), *wid = malloc(sizeof(float) * n * hd);
                        qhx_attend_args a = {form, hd, G, n, q, (size_t)2 * hd, kc + head, vc + head, stride, 0.125f, o, (size_t)hd, scratch};
                        ks->attend(&a);
                        a.o = want;
                        ref->attend(&a);
                        if (hd == 256) { /* the rows packed as the model keeps them: the set's path for them, bit for bit */
                            unsigned char *kp = malloc((size_t)n * head), *vp = malloc((size_t)n * head);
                            for (int p = 0; p < n; p++) memcpy(kp + p * head, kc + p * stride + head, head), memcpy(vp + p * head, vc + p * stride + head, head);
                            qhx_attend_args b = a;
                            b.k = kp, b.v = vp, b.stride = head, b.o = exact;
                            ks->attend(&b);
                            if (memcmp(exact, o, sizeof(float) * G * hd)) packed_ok = 0;
                            free(kp), free(vp);
                        }
                        double scale = 0;
                        for (int i = 0; i < G * hd; i++) scale = fmax(scale, fabs(want[i]));
                        for (int i = 0; i < G * hd; i++) worst = fmax(worst, fabs(o[i] - want[i]) / scale);
                        /* the same attention over the exact rows: what the form costs */
                        unsigned char *ke = calloc((size_t)n, hd * 4), *ve = calloc((size_t)n, hd * 4);
                        memcpy(ke, K, sizeof(float) * n * hd), memcpy(ve, V, sizeof(float) * n * hd);
                        const qhx_attend_args e = {QHX_KV_F32, hd, G, n, q, (size_t)2 * hd, ke, ve, (size_t)hd * 4, 0.125f, exact, (size_t)hd, scratch};
                        ref->attend(&e);
                        for (int i = 0; i < G * hd; i++) worst_form[f] = fmax(worst_form[f], fabs(exact[i] - want[i]) / scale);
                        ks->kv_widen(form, kc + head, stride, hd, n, wid, hd);
                        for (int p = 0; p < n; p++)
                            for (int i = 0; i < hd; i++)
                                if (memcmp(&wid[(size_t)p * hd + i], &(float){qhx_kv_at(form, kc + p * stride + head, hd, i)}, 4)) widen_ok = 0;
                        free(o), free(scratch), free(wid), free(kc), free(vc), free(ke), free(ve);
                        cases++;
                    }
                    free(q), free(K), free(V);
                }
        /* softmax_tile: two tiles in a row (the second's maxima above or below the first's) of odd
         * widths, queries that see none, some or all of a tile's rows, against the same running
         * softmax in double: the weights, the sums, and the outputs scaled by the shrink */
        double soft_err = 0;
        const int tns[] = {1, 5, 64, 128}, nqs[] = {1, 7, 16, 32};
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) {
                const int n = tns[a], nq = nqs[b], ld = nq + 3, hd = 21;
                float *st = malloc(sizeof(float) * n * ld), *o = malloc(sizeof(float) * nq * hd), m[32], sm[32];
                double dm[32], dsum[32], *dst = malloc(sizeof(double) * n * ld), *dout = malloc(sizeof(double) * nq * hd);
                int sn[32];
                for (int i = 0; i < nq; i++) m[i] = dm[i] = -INFINITY, sm[i] = dsum[i] = 0;
                for (int i = 0; i < nq * hd; i++) o[i] = frand(), dout[i] = o[i];
                for (int tile = 0; tile < 2; tile++) {
                    for (int i = 0; i < n * ld; i++) st[i] = frand() * 8 + (tile ? 4 * frand() : 0), dst[i] = st[i];
                    for (int i = 0; i < nq; i++) sn[i] = i % 3 == 0 ? 0 : i % 3 == 1 ? n : (int)(frand() * n + 0.5) % (n + 1);
                    ks->softmax_tile(st, n, ld, nq, sn, m, sm, o, hd, hd);
                    for (int i = 0; i < nq; i++) {
                        double mx = dm[i], acc = 0;
                        for (int p = 0; p < sn[i]; p++) mx = fmax(mx, dst[p * ld + i]);
                        const double shrink = mx > -INFINITY ? exp(dm[i] - mx) : 1;
                        for (int p = 0; p < n; p++) {
                            const double e = p < sn[i] ? exp(dst[p * ld + i] - mx) : 0;
                            acc += e;
                            soft_err = fmax(soft_err, fabs(st[p * ld + i] - e));
                        }
                        dsum[i] = dsum[i] * shrink + acc, dm[i] = mx;
                        for (int e = 0; e < hd; e++) dout[i * hd + e] *= shrink;
                        soft_err = fmax(soft_err, fabs(sm[i] - dsum[i]) / fmax(1, dsum[i]));
                        soft_err = fmax(soft_err, m[i] == (float)dm[i] ? 0 : 1);
                    }
                    for (int i = 0; i < nq * hd; i++) soft_err = fmax(soft_err, fabs(o[i] - dout[i]));
                }
                if (soft_err != soft_err) soft_err = 1; /* NaN */
                free(st), free(o), free(dst), free(dout);
            }
        printf("  kernels %-12s attend: %d cases, worst %.1e of the output scale against the double oracle; "
               "the forms cost f32 %.1e, f16 %.1e, q8 %.1e; softmax_tile %.1e\n",
               sets[s], cases, worst, worst_form[0], worst_form[1], worst_form[2], soft_err);
        CHECK(worst <= 5e-6, "%s attend: %.2e from the oracle", sets[s], worst);
        CHECK(packed_ok, "%s attend: packed rows give other outputs than the same rows strided", sets[s]);
        CHECK(worst_form[0] == 0 && worst_form[1] <= 2e-3 && worst_form[1] > 0 && worst_form[2] <= 2e-2 && worst_form[2] > worst_form[1],
              "%s: stored forms off by f32 %.2e f16 %.2e q8 %.2e", sets[s], worst_form[0], worst_form[1], worst_form[2]);
        CHECK(widen_ok, "%s kv_widen differs from qhx_kv_at", sets[s]);
        CHECK(soft_err <= 3e-6, "%s softmax_tile: %.2e from the double one", sets[s], soft_err);
    }
}

int main(void) {
    /* each set against its twin, scalar, which in turn is held to ref (fp32 activations
     * throughout, double sums) within its rounding: half a step of the int16 activations' 64-column
     * blocks for W8, of the int8 ones' 32-column blocks for W4. Every set compiled in (those this
     * CPU lacks report "not run"). */
    static char names[512];
    const char *sets[32];
    size_t n_sets = 0;
    snprintf(names, sizeof names, "%s", qhx_kernels_names());
    for (char *tok = strtok(names, " "); tok && n_sets < 32; tok = strtok(NULL, " ")) sets[n_sets++] = tok;
    const int rows[] = {1, 3, 4, 5, 17, 67}, cols[] = {1, 7, 8, 9, 31, 64, 100, 257}, Ts[] = {1, 2, 3, 4, 5, 9, 16, 17, 19, 21, 26, 40}; /* past 16: every remainder of prefill's passes of 4 (W8) and 6 (W4) tokens */
    const qhx_dtype dts[] = {QHX_I8, QHX_F16, QHX_BF16, QHX_F32, QHX_Q4};
    int w4_exact = 0;
    int variants = 0;
    for (size_t s = 0; s < n_sets; s++) {
        const qhx_kernel_set *ks = qhx_kernels_find(sets[s]);
        if (!ks) { printf("  kernels %-7s not run: %s\n", sets[s], qhx_last_error()); continue; }
        if (!strcmp(sets[s], "ref")) continue; /* the oracle */
        const int own_twin = !strcmp(sets[s], "scalar");
        const qhx_kernel_set *twin = qhx_kernels_find(own_twin ? "ref" : "scalar");
        const double tol = 1e-6;
        variants++;
        double worst = 0;
        int cases = 0;
        for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
            for (size_t ri = 0; ri < 6; ri++)
                for (size_t ci = 0; ci < 8; ci++)
                    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
                        matrix m = make(dts[d], rows[ri], cols[ci]);
                        const int T = Ts[ti];
                        float *X = malloc(sizeof(float) * (size_t)T * cols[ci]);
                        float *a = malloc(sizeof(float) * (size_t)T * rows[ri]), *b = malloc(sizeof(float) * (size_t)T * rows[ri]);
                        for (int i = 0; i < T * cols[ci]; i++) X[i] = frand();
                        const qhx_exec ext = {.ks = twin}, exk = {.ks = ks};
                        qhx_matmul(&ext, &m.t, X, T, a);
                        qhx_matmul(&exk, &m.t, X, T, b);
                        const double e = compare(&m, X, T, b, a);
                        /* the twin's arithmetic, bit for bit: every W4 kernel, and W8 prefill (T > 1) through the
                         * int8 dot products */
                        if (!own_twin && ((dts[d] == QHX_Q4 && ks->matmul_acts_w4) || (dts[d] == QHX_I8 && (T > 1 || ks->decode_acts) && w8_exact(ks)))) {
                            int same = 1;
                            for (int i = 0; i < T * rows[ri]; i++) same &= a[i] == b[i];
                            CHECK(same, "%s vs %s: %s [%d x %d] T=%d: not bit for bit (error %.2e)", sets[s], twin->name, dt_name(dts[d]), rows[ri],
                                  cols[ci], T, e);
                            w4_exact += same;
                            cases++;
                            free(X), free(a), free(b);
                            drop(&m);
                            continue;
                        }
                        /* W4 through an integer kernel takes int8 activations, W8 int16 ones, fp32 where
                         * the set has no such kernel (ref; NEON without sdot): where only one side
                         * rounds, the rounding apart */
                        const double tol_here = dts[d] == QHX_Q4 && !ks->matmul_acts_w4 != !twin->matmul_acts_w4 ? 2e-2
                                                : dts[d] == QHX_I8 && !ks->matmul_acts != !twin->matmul_acts   ? 1e-4
                                                                                                               : tol;
                        if (!(e <= worst) && tol_here == tol) worst = e;
                        if (e > tol_here)
                            CHECK(0, "%s vs %s: %s [%d x %d] T=%d: error %.2e", sets[s], twin->name, dt_name(dts[d]), rows[ri], cols[ci], T, e);
                        cases++;
                        free(X), free(a), free(b);
                        drop(&m);
                    }
        CHECK(worst <= tol, "%s: worst %.2e", sets[s], worst);
        if (ks->matmul_acts_w4 && !own_twin)
            printf("  kernels %-10s W4%s: every shape bit for bit the twin's\n", sets[s],
                   !w8_exact(ks) ? "" : ks->decode_acts ? " and W8" : " and W8 prefill");
        printf("  kernels %-10s vs %-10s: %d shapes x dtypes, worst error %.2e of sum|w x| (tolerance %.0e)\n", sets[s], twin->name,
               cases, worst, tol);
    }
    /* scalar against ref, and where auto is a SIMD set, at least that against scalar */
    CHECK(variants >= 1 + !!strcmp(qhx_kernels_find("auto")->name, "scalar"), "only %d kernel sets ran against their twin", variants);

    /* the first rows of a matrix as a view of their own (the MTP drafter's draft vocabulary: a
     * prefix of the lm-head, a multiple of the W8 row group) give the full product's first rows,
     * bit for bit, in every set and dtype */
    int prefix_cases = 0;
    for (size_t s = 0; s < n_sets; s++) {
        const qhx_kernel_set *ks = qhx_kernels_find(sets[s]);
        if (!ks) continue;
        for (size_t d = 0; d < 4; d++)
            for (int T = 1; T <= 3; T += 2) {
                matrix m = make(dts[d], 67, 100);
                qhx_tensor view = m.t;
                view.rows = 64;
                float *X = malloc(sizeof(float) * T * 100), *a = malloc(sizeof(float) * T * 67), *b = malloc(sizeof(float) * T * 64);
                for (int i = 0; i < T * 100; i++) X[i] = frand();
                const qhx_exec ex = {.ks = ks};
                qhx_matmul(&ex, &m.t, X, T, a);
                qhx_matmul(&ex, &view, X, T, b);
                int same = 1;
                for (int t = 0; t < T; t++) same &= !memcmp(a + t * 67, b + t * 64, sizeof(float) * 64);
                CHECK(same, "%s %s: a 64-row prefix view differs from the full product's rows (T=%d)", sets[s], dt_name(dts[d]), T);
                prefix_cases++;
                free(X), free(a), free(b);
                drop(&m);
            }
    }
    printf("  a prefix of rows as a view: the full product's rows in %d set x dtype x T cases\n", prefix_cases);

    /* per_token (a stepwise session's pieces): T tokens in one call give bit for bit what T
     * one-token calls give, in every set and dtype, W8 decode through the set's own kernel */
    int piece_cases = 0;
    for (size_t s = 0; s < n_sets; s++) {
        const qhx_kernel_set *ks = qhx_kernels_find(sets[s]);
        if (!ks) continue;
        for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
            for (int T = 2; T <= QHX_DECODE_MAX_T; T += T < 5 ? 1 : T < 7 ? 2 : QHX_DECODE_MAX_T - 7) { /* 2-5, 7, 16: every remainder of the decode kernels' 4-token passes */
                matrix m = make(dts[d], 67, 257);
                float *X = malloc(sizeof(float) * T * 257), *a = malloc(sizeof(float) * T * 67), *b = malloc(sizeof(float) * T * 67);
                for (int i = 0; i < T * 257; i++) X[i] = frand();
                const qhx_exec all = {.ks = ks, .per_token = 1}, one = {.ks = ks};
                qhx_matmul(&all, &m.t, X, T, a);
                for (int t = 0; t < T; t++) qhx_matmul(&one, &m.t, X + t * 257, 1, b + t * 67);
                CHECK(!memcmp(a, b, sizeof(float) * T * 67), "%s %s: %d tokens per_token differ from %d one-token calls", sets[s],
                      dt_name(dts[d]), T, T);
                piece_cases++;
                free(X), free(a), free(b);
                drop(&m);
            }
    }
    printf("  per_token: T tokens at once equal T one-token calls in %d set x dtype x T cases\n", piece_cases);

    /* gemm (prefill attention's products) of every set against the double reference, odd shapes
     * and strides, A row-major and transposed (acs), C accumulated into: |error| relative to
     * sum_k |alpha A B| + |C| */
    for (size_t s = 0; s < n_sets; s++) {
        const qhx_kernel_set *ks = qhx_kernels_find(sets[s]);
        if (!ks) continue; /* reported above */
        const int Ms[] = {1, 3, 4, 5, 9}, Ns[] = {1, 8, 15, 16, 17, 40}, Ks[] = {1, 7, 64, 129, 300};
        double worst = 0;
        for (int mi = 0; mi < 5; mi++)
            for (int ni = 0; ni < 6; ni++)
                for (int ki = 0; ki < 5; ki++)
                    for (int tr = 0; tr < 2; tr++) {
                        const int M = Ms[mi], N = Ns[ni], K = Ks[ki], ldb = N + 5, ldc = N + 2;
                        const int lda = tr ? 1 : K + 3, acs = tr ? M + 2 : 1, na = tr ? K * (M + 2) : M * (K + 3);
                        float *A = malloc(sizeof(float) * (size_t)na), *B = malloc(sizeof(float) * (size_t)K * ldb);
                        float *C = malloc(sizeof(float) * (size_t)M * ldc), *R = malloc(sizeof(float) * (size_t)M * ldc);
                        for (int i = 0; i < na; i++) A[i] = frand();
                        for (int i = 0; i < K * ldb; i++) B[i] = frand();
                        for (int i = 0; i < M * ldc; i++) C[i] = R[i] = frand();
                        ks->gemm(M, N, K, -0.75f, A, lda, acs, B, ldb, C, ldc);
                        for (int i = 0; i < M; i++)
                            for (int j = 0; j < N; j++) {
                                double ref = R[i * ldc + j], mag = fabs(ref);
                                for (int k = 0; k < K; k++) {
                                    const double t = 0.75 * A[i * lda + k * acs] * B[k * ldb + j];
                                    ref -= t, mag += fabs(t);
                                }
                                const double e = fabs(C[i * ldc + j] - ref) / mag;
                                if (!(e <= worst)) worst = e;
                            }
                        for (int i = 0; i < M; i++) /* the padding between rows stays untouched */
                            for (int j = N; j < ldc; j++) worst = C[i * ldc + j] == R[i * ldc + j] ? worst : 1.0;
                        free(A), free(B), free(C), free(R);
                    }
        CHECK(worst <= 1e-6, "%s gemm: worst error %.2e", sets[s], worst);
        printf("  gemm    %-9s vs double: 150 shapes x A as is and transposed (K up to 300), worst error %.2e of sum|a b| (tolerance 1e-06)\n", sets[s], worst);
    }

    /* conv (the Gated DeltaNet's causal conv, then SiLU) of every set: its sums are the reference's,
     * bit for bit, in every set (the products added in the spec's order, here in plain C), and
     * only the SiLU is the set's own (its silu over those sums, bit for bit); T tokens in one call
     * equal T one-token calls, FIFO included; K = 4 (Qwen3.5's, a constant in the SIMD layers)
     * and others, channel counts across the lanes, channels of a wider row. */
    for (size_t s = 0; s < n_sets; s++) {
        const qhx_kernel_set *ks = qhx_kernels_find(sets[s]);
        if (!ks) continue;
        const int Ks[] = {1, 2, 4, 5}, ns[] = {1, 15, 16, 17, 64, 100}, Tc[] = {1, 2, 3, 7};
        const size_t C = 131;
        int differs = 0, split_differs = 0, cases = 0;
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 6; b++)
                for (int c = 0; c < 4; c++) {
                    const int K = Ks[a], n = ns[b], T = Tc[c];
                    float *taps = malloc(sizeof(float) * K * C), *fifo = malloc(sizeof(float) * (K + 1) * C), *fifo1 = malloc(sizeof(float) * (K + 1) * C);
                    float *in = malloc(sizeof(float) * T * C), *out = malloc(sizeof(float) * T * C), *out1 = malloc(sizeof(float) * T * C);
                    float *want = malloc(sizeof(float) * T * C), *hist = malloc(sizeof(float) * (T + K) * C);
                    for (size_t i = 0; i < (size_t)K * C; i++) taps[i] = frand();
                    for (size_t i = 0; i < (size_t)(K + 1) * C; i++) fifo[i] = fifo1[i] = frand();
                    for (size_t i = 0; i < (size_t)T * C; i++) in[i] = 2 * frand(), out[i] = out1[i] = want[i] = 0;
                    /* the inputs in time order: the FIFO's K - 1, then the tokens' */
                    for (int r = 0; r < K - 1; r++) memcpy(hist + (size_t)r * C, fifo + (size_t)r * C, sizeof(float) * C);
                    memcpy(hist + (size_t)(K - 1) * C, in, sizeof(float) * T * C);
                    for (int t = 0; t < T; t++) {
                        for (int i = 0; i < n; i++) {
                            float v = taps[(size_t)(K - 1) * C + i] * in[(size_t)t * C + i];
                            for (int j = 0; j < K - 1; j++) v += taps[(size_t)j * C + i] * hist[(size_t)(t + j) * C + i];
                            want[(size_t)t * C + i] = v;
                        }
                        ks->silu(want + (size_t)t * C, NULL, (size_t)n);
                    }
                    ks->conv(taps, fifo, in, out, C, K, T, n);
                    for (int t = 0; t < T; t++) ks->conv(taps, fifo1, in + (size_t)t * C, out1 + (size_t)t * C, C, K, 1, n);
                    differs += memcmp(out, want, sizeof(float) * T * C) != 0;
                    for (int r = 0; r < K - 1; r++) differs += memcmp(fifo + (size_t)r * C, hist + (size_t)(T + r) * C, sizeof(float) * n) != 0;
                    differs += memcmp(fifo + (size_t)(K - 1) * C, fifo1 + (size_t)(K - 1) * C, sizeof(float) * 2 * C) != 0; /* past the FIFO: untouched */
                    split_differs += memcmp(out, out1, sizeof(float) * T * C) != 0 || memcmp(fifo, fifo1, sizeof(float) * (K + 1) * C) != 0;
                    cases++;
                    free(taps), free(fifo), free(fifo1), free(in), free(out), free(out1), free(want), free(hist);
                }
        CHECK(differs == 0, "%s conv: %d of %d shapes differ from the reference's sums under the set's SiLU", sets[s], differs, cases);
        CHECK(split_differs == 0, "%s conv: %d shapes where T tokens in one call differ from T one-token calls", sets[s], split_differs);
        printf("  conv    %-9s %d shapes: the reference's sums and the set's SiLU bit for bit; one call = T calls\n", sets[s], cases);
    }

    /* delta_rule (the recurrent rule over T tokens of one head) of every set against the rule in
     * double, odd head sizes (the SIMD sets sweep 32 or 64 columns at a time), tokens in rows of a
     * wider matrix as the model lays them out: |error| relative to 1 + max|S|. And T tokens in one
     * call equal T one-token calls bit for bit, which prefill, decode and rewinds rely on. */
    for (size_t s = 0; s < n_sets; s++) {
        const qhx_kernel_set *ks = qhx_kernels_find(sets[s]);
        if (!ks) continue;
        const int dks[] = {1, 7, 128}, dvs[] = {1, 31, 32, 33, 100, 128}, T = 5, stride = 400, gstride = 3;
        double worst = 0;
        int split_differs = 0;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 6; b++)
                for (int rep = 0; rep < 2; rep++) {
                    const int dk = dks[a], dv = dvs[b];
                    float *S = malloc(sizeof(float) * dk * dv), *S1 = malloc(sizeof(float) * dk * dv), *x = malloc(sizeof(float) * T * stride);
                    float *o = malloc(sizeof(float) * T * dv), *o1 = malloc(sizeof(float) * T * dv), *kv = malloc(sizeof(float) * dv);
                    float gb[2 * T * gstride];
                    double *R = malloc(sizeof(double) * dk * dv), *d = malloc(sizeof(double) * dv);
                    float *beta = gb, *g = gb + T * gstride;
                    for (int i = 0; i < dk * dv; i++) R[i] = S[i] = S1[i] = frand();
                    for (int t = 0; t < T; t++) {
                        float *q = x + t * stride, *k = q + dk, *v = k + dk;
                        for (int i = 0; i < dk; i++) q[i] = frand(), k[i] = frand() / sqrtf((float)dk);
                        for (int j = 0; j < dv; j++) v[j] = frand();
                        beta[t * gstride] = 0.5f + 0.5f * frand();
                        g[t * gstride] = rep && t == 2 ? -80.0f : logf(0.6f + 0.3f * frand()); /* rep: a decay of e^-80 */
                    }
                    const qhx_delta_args all = {x, x + dk, x + 2 * dk, stride, beta, g, gstride, o, dv, T, dk, dv, kv, rep ? S1 : NULL};
                    ks->delta_rule(S, &all); /* rep: fetching `next` (any dk x dv floats) must not change a thing */
                    for (int t = 0; t < T; t++) {
                        const qhx_delta_args one = {x + t * stride, x + t * stride + dk, x + t * stride + 2 * dk, stride, beta + t * gstride,
                                                    g + t * gstride, gstride, o1 + t * dv, dv, 1, dk, dv, kv, NULL};
                        ks->delta_rule(S1, &one);
                    }
                    split_differs += memcmp(S, S1, sizeof(float) * dk * dv) != 0 || memcmp(o, o1, sizeof(float) * T * dv) != 0;
                    for (int t = 0; t < T; t++) {
                        const float *q = x + t * stride, *k = q + dk, *v = k + dk;
                        const double decay = exp((double)g[t * gstride]);
                        double mag = 1;
                        for (int i = 0; i < dk * dv; i++) R[i] *= decay, mag = fabs(R[i]) > mag ? fabs(R[i]) : mag;
                        for (int j = 0; j < dv; j++) {
                            double acc = 0;
                            for (int i = 0; i < dk; i++) acc += R[i * dv + j] * k[i];
                            d[j] = (v[j] - acc) * beta[t * gstride];
                        }
                        for (int i = 0; i < dk * dv; i++) R[i] += k[i / dv] * d[i % dv];
                        for (int j = 0; j < dv; j++) {
                            double acc = 0;
                            for (int i = 0; i < dk; i++) acc += R[i * dv + j] * q[i];
                            worst = fmax(worst, fabs(o[t * dv + j] - acc) / (mag * (1 + dk)));
                        }
                        if (t == T - 1)
                            for (int i = 0; i < dk * dv; i++) worst = fmax(worst, fabs(S[i] - R[i]) / mag);
                    }
                    if (worst != worst) worst = 1; /* NaN */
                    free(S), free(S1), free(x), free(o), free(o1), free(kv), free(R), free(d);
                }
        CHECK(worst <= 1e-6, "%s delta_rule: worst error %.2e", sets[s], worst);
        CHECK(split_differs == 0, "%s delta_rule: %d shapes where 5 tokens in one call differ from 5 one-token calls", sets[s], split_differs);
        printf("  delta   %-9s vs double: 36 shapes x 5 tokens, worst error %.2e (tolerance 1e-06); one call = 5 calls bit for bit\n",
               sets[s], worst);
    }

    /* silu (with and without the multiplier) of every set against double: across the range,
     * both extremes, the ragged tail; |error| <= 4e-7 |exact| + 1e-30 (results near the underflow) */
    for (size_t s = 0; s < n_sets; s++) {
        const qhx_kernel_set *ks = qhx_kernels_find(sets[s]);
        if (!ks) continue;
        enum { N = 4099 };
        float *x = malloc(sizeof(float) * N), *m = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
        double worst = 0;
        for (int with = 0; with < 2; with++) {
            for (int i = 0; i < N; i++) x[i] = (float)(i - N / 2) / 20.0f + 0.01f * frand(), m[i] = 3 * frand();
            x[0] = -1e30f, x[1] = 1e30f, x[2] = 0.0f, x[3] = -0.0f, x[4] = 1e-40f, x[5] = -88.5f;
            memcpy(y, x, sizeof(float) * N);
            ks->silu(y, with ? m : NULL, N);
            for (int i = 0; i < N; i++) {
                const double e = x[i] / (1.0 + exp(-(double)x[i])) * (with ? m[i] : 1.0);
                const double err = fabs(y[i] - e) / (fabs(e) + 1e-30 / 4e-7);
                worst = err == err ? fmax(worst, err) : 1;
            }
        }
        CHECK(worst <= 4e-7, "%s silu: worst error %.2e", sets[s], worst);
        printf("  silu    %-9s vs double: 2 x %d values, worst relative error %.2e (tolerance 4e-07)\n", sets[s], N, worst);
        free(x), free(m), free(y);
    }

    /* the W8 layout: every element where qhx_tensor_get finds it, padding zero */
    {
        matrix m = make(QHX_I8, 7, 70);
        int bad = 0;
        for (int r = 0; r < 7; r++)
            for (int c = 0; c < 70; c++) bad += qhx_tensor_get(&m.t, (size_t)r * 70 + c) != m.dense[(size_t)r * 70 + c];
        const int8_t *d = m.data;
        for (int c = 70; c < 96; c++) bad += d[qhx_w8_at(70, 1, (size_t)c)] != 0;   /* the ragged block */
        for (int c = 0; c < 96; c++) bad += d[qhx_w8_at(70, 7, (size_t)c)] != 0;    /* the padding row */
        CHECK(bad == 0 && qhx_w8_bytes(7, 70) == 8 * 96, "W8 layout: %d misplaced bytes", bad);
        drop(&m);
    }

    /* rounded-activation kernels on shapes whose weights span several of their L2 row blocks,
     * decode and prefill */
    const qhx_kernel_set *q8 = qhx_kernels_find("auto");
    if (q8 && q8->matmul_acts && strcmp(q8->name, "scalar")) {
        const qhx_kernel_set *twin = qhx_kernels_find("scalar");
        matrix m = make(QHX_I8, 602, 3001);
        const int Tq[] = {2, 7, 33};
        for (size_t ti = 0; ti < sizeof Tq / sizeof *Tq; ti++) {
            const int T = Tq[ti];
            float *X = malloc(sizeof(float) * (size_t)T * 3001), *a = malloc(sizeof(float) * (size_t)T * 602),
                  *b = malloc(sizeof(float) * (size_t)T * 602);
            for (int i = 0; i < T * 3001; i++) X[i] = frand();
            const qhx_exec ext = {.ks = twin}, exk = {.ks = q8};
            qhx_matmul(&ext, &m.t, X, T, a);
            qhx_matmul(&exk, &m.t, X, T, b);
            const double e = compare(&m, X, T, b, a);
            CHECK(e <= 1e-6, "%s vs %s [602 x 3001] T=%d: error %.2e", q8->name, twin->name, T, e);
            free(X), free(a), free(b);
        }
        drop(&m);
    }

    /* the pool splits rows; every row is still computed whole, so results are bit-identical */
    const qhx_kernel_set *best = qhx_kernels_find("auto");
    qhx_pool *pool = qhx_pool_new(3);
    matrix m = make(QHX_I8, 1000, 333);
    float *X = malloc(sizeof(float) * 5 * 333), *a = malloc(sizeof(float) * 5 * 1000), *b = malloc(sizeof(float) * 5 * 1000);
    for (int i = 0; i < 5 * 333; i++) X[i] = frand();
    qhx_acts acts = {0};
    qhx_exec one = {.ks = best}, three = {.ks = best, .pool = pool, .acts = &acts};
    for (int rep = 0; rep < 50; rep++) {
        qhx_matmul(&one, &m.t, X, 5, a);
        qhx_matmul(&three, &m.t, X, 5, b);
        if (memcmp(a, b, sizeof(float) * 5 * 1000)) { CHECK(0, "pooled matmul differs at repetition %d", rep); break; }
    }
    CHECK(qhx_pool_size(pool) == 3, "pool size %d", qhx_pool_size(pool));

    /* a group mixing W8 and W4 (no bundle does): W4 takes int8 activations as alone, bit for bit,
     * and W8 runs on fp32 activations, within fp32 rounding of the reference */
    if (best->matmul_acts_w4) {
        matrix m8 = make(QHX_I8, 70, 333), m4 = make(QHX_Q4, 90, 333);
        float *y8 = malloc(sizeof(float) * 5 * 70), *y4 = malloc(sizeof(float) * 5 * 90), *r8 = malloc(sizeof(float) * 5 * 70),
              *r4 = malloc(sizeof(float) * 5 * 90);
        const qhx_tensor *Wg[2] = {&m8.t, &m4.t};
        float *const Yg[2] = {y8, y4};
        const qhx_exec fp32 = {.ks = qhx_kernels_find("ref")};
        CHECK(qhx_matmul_many(&three, X, 5, 2, Wg, Yg) == QHX_OK, "mixed group: %s", qhx_last_error());
        qhx_matmul(&one, &m4.t, X, 5, r4);
        qhx_matmul(&fp32, &m8.t, X, 5, r8);
        CHECK(!memcmp(y4, r4, sizeof(float) * 5 * 90), "mixed group: W4 differs from W4 alone");
        const double e = compare(&m8, X, 5, y8, r8);
        CHECK(e <= 1e-6, "mixed group: W8 off fp32 by %.2e", e);
        free(y8), free(y4), free(r8), free(r4);
        drop(&m8), drop(&m4);
    }

    /* floating-point mode: fast sets flush subnormals, ref does not, leave restores, and every
     * worker of a parallel-for computes in the caller's mode */
    {
        const unsigned before = qhx_fp_mode();
        const unsigned saved = qhx_fp_enter(best);
        const float tiny = 1e-39f; /* subnormal */
        volatile float x = tiny, y = 0.5f;
        const float fast = x * y;
        unsigned modes[3] = {0};
        qhx_pool_run(pool, report_mode, modes);
        const unsigned ref = qhx_fp_enter(qhx_kernels_find("ref"));
        const float exact = x * y;
        qhx_fp_leave(ref);
        qhx_fp_leave(saved);
#if defined(__x86_64__)
        CHECK(fast == 0.0f && exact == tiny * 0.5f, "flush-to-zero: fast %g, ref %g", fast, exact);
        CHECK(modes[0] == modes[1] && modes[1] == modes[2] && modes[0] != before, "workers' modes %x %x %x (caller %x)",
              modes[0], modes[1], modes[2], before);
#endif
        CHECK(qhx_fp_mode() == before, "mode %x after leave, %x before", qhx_fp_mode(), before);
        printf("  fp mode: fast sets flush subnormals (1e-39 x 0.5 = %g), ref keeps them (%g); 3 workers follow the caller\n",
               fast, exact);
    }
    qhx_pool_free(pool);
    qhx_acts_free(&acts);
    free(X), free(a), free(b);
    drop(&m);

    /* activation rounding: every SIMD set's integer parts and scales are the scalar ones bit for
     * bit, on rows with ragged tails, zero blocks and values at the block maximum; int16 parts
     * stay in range and within half a step of x */
    {
        const size_t colsv[] = {1, 31, 32, 33, 63, 64, 65, 100, 257};
        int bad = 0, rounded = 0;
        double q16_err = 0;
        for (size_t s = 0; s < n_sets; s++) {
            const qhx_kernel_set *ks = qhx_kernels_find(sets[s]);
            if (!ks || ks->acts != QHX_ACTS_Q16) continue;
            const qhx_kernel_set *twin = qhx_kernels_find("scalar");
            for (size_t ci = 0; ci < 2 * sizeof colsv / sizeof *colsv; ci++) {
                const int q16 = ci % 2; /* W8's int16 rounding, and W4's int8 one */
                const size_t blk = q16 ? QHX_Q16_BLOCK : QHX_Q8_BLOCK, ncols = colsv[ci / 2], pad = (ncols + blk - 1) / blk * blk;
                float x[257];
                /* a zero block: columns 64-127 (one int16 block, two int8 ones) */
                for (size_t c = 0; c < ncols; c++) x[c] = c >= 64 && c < 128 ? 0.0f : frand() * (c % 5 == 0 ? 40.0f : 1.0f);
                int8_t buf[2][2][320] = {{{0}}};
                int16_t v16[2][320] = {{0}};
                float sc[2][10] = {{0}};
                qhx_acts ra[2];
                for (int k = 0; k < 2; k++) {
                    int8_t laq[320];
                    ra[k] = (qhx_acts){.q = q16 ? NULL : buf[k][0], .aq = buf[k][1], .laq = laq, .v = q16 ? v16[k] : NULL, .s = sc[k], .pad = pad};
                    const qhx_kernel_set *by = k ? ks : twin;
                    (q16 ? by->round_acts : by->round_q8)(x, ncols, &ra[k], 0);
                }
                bad += memcmp(buf[0][0], buf[1][0], pad) || memcmp(v16[0], v16[1], sizeof(int16_t) * pad) ||
                       memcmp(sc[0], sc[1], sizeof(float) * (pad / blk));
                if (ra[0].v)
                    for (size_t c = 0; c < pad; c++) {
                        const int v = v16[0][c];
                        bad += v < -QHX_Q16_MAX || v > QHX_Q16_MAX || (c >= ncols && v);
                        const double step = sc[0][c / blk], want = c < ncols ? x[c] : 0;
                        if (step > 0) q16_err = fmax(q16_err, fabs(want - step * v) / step);
                        int8_t hi, lo; /* the split int8 multipliers take: exact, in range */
                        qhx_q16_split(v, &hi, &lo);
                        bad += 256 * hi + lo != v || hi < -127;
                    }
                rounded++;
            }
        }
        CHECK(bad == 0, "activation rounding differs from the scalar twin in %d of %d rows", bad, rounded);
        /* half a step, plus the fp32 rounding of 1/step and of the step, which at |v| near the
         * maximum moves x by up to 2 x 2^-24 x |v| steps */
        CHECK(q16_err <= 0.5 + QHX_Q16_MAX * 0x1p-23, "int16 rounding error %.4f steps", q16_err);
        printf("  activation rounding: %d rows bit for bit the scalar twin's; int16 error at most %.3f of a step\n", rounded, q16_err);
    }

    /* the quantizer: |w - q s| <= s / 2, the largest weight maps to +-127 exactly */
    float w[300];
    int8_t q[300];
    for (int i = 0; i < 300; i++) w[i] = frand() * 3;
    w[17] = -4.5f;
    const float s = qhx_quantize_row(w, 300, q);
    double worst = 0;
    for (int i = 0; i < 300; i++) worst = fmax(worst, fabs(w[i] - q[i] * (double)s));
    CHECK(worst <= s * 0.5 * (1 + 1e-6), "quantization error %.3e > half step %.3e", worst, s * 0.5);
    CHECK(q[17] == -127 && fabsf(s - 4.5f / 127) < 1e-9f, "max weight -> %d, scale %g", q[17], s);
    float zero[4] = {0};
    CHECK(qhx_quantize_row(zero, 4, q) == 0.0f && q[0] == 0, "a zero row quantizes to zeros");

    CHECK(qhx_kernels_find("nope") == NULL && strstr(qhx_last_error(), "unknown"), "unknown kernel set: %s", qhx_last_error());
    attention_tests(sets, n_sets);
    return tl_finish("kernels");
}
