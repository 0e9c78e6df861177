/* qhx bench: prefill and decode speed against the memory bandwidth measured in the same run. */
#include "cli.h"
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "util/argmax.h"

#include <jansson.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
/* ---- qhx bench ------------------------------------------------------------------------------- */

static const char bench_help[] =
    "usage: qhx bench MODEL [--json] [--prompts 128,512,1024] [--decode N] [--depth N,...] [-t N] [--kernels K]\n"
    "Prefill of each prompt size from a fresh session, then N decode steps (default 128) after a\n"
    "128-token prompt, on seeded random token ids. Reports tok/s, the weight bytes decode reads per\n"
    "second against this machine's read bandwidth measured in the same run, time to first token\n"
    "(the 512-token prompt, or the largest below it) and peak RSS.\n"
    "  --depth N[,N...]  also, after N tokens of context each: prefill of 512 more tokens and\n"
    "                 --decode steps (at most 64) at that depth, alternated 8 steps at a time with\n"
    "                 decode from an empty context, and the ratio of the two\n"
    "  --draft ngram|mtp  also time speculative decoding's verify pass: 1 + N tokens in one stepwise\n"
    "                 call against N + 1 one-token calls from the same state, N = 1 .. --draft-max\n"
    "                 (default 8), the mark before each pass and the rewind after a rejection; mtp:\n"
    "                 also the MTP head drafting N tokens\n" RUNTIME_HELP;

/* Speculative decoding's costs after a 128-token prompt: a verify pass of 1 + N tokens against
 * N + 1 decode steps (best of 3, alternating), the mark before a pass and the rewind after a
 * rejection, and with the MTP head, its drafts. */
/* x to `digits` decimals, as the report shows it */
static json_t *num(double x, int digits) {
    const double k = pow(10, digits);
    return json_real(round(x * k) / k);
}

/* best of 3 */
#define BEST(var, stmt)                                      \
    do {                                                     \
        const double t0_ = now_s();                          \
        stmt;                                                \
        const double dt_ = now_s() - t0_;                    \
        var = dt_ < var ? dt_ : var;                         \
    } while (0)

static int bench_verify(qhx_model *m, qhx_session *s, const int32_t *ids, int max, int mtp, json_t *report) {
    qhx_snapshot *snap = NULL; /* the state after the prompt, put back before every measurement */
    int rc = 1;
    json_t *verify = json_array(), *drafts = json_array();
    qhx_session_reset(s);
    if (qhx_session_eval(s, ids, 128, QHX_EVAL_SEQUENCE, NULL, NULL) || qhx_session_snapshot(s, &snap)) goto fail;
    double mark = 1e30;
    for (int r = 0; r < 3; r++) BEST(mark, if (qhx_session_mark(s)) goto fail);
    if (report)
        json_object_set_new(report, "speculative", json_pack("{s:o, s:O}", "mark_ms", num(mark * 1e3, 3), "verify", verify));
    else fprintf(stderr, "  speculative decoding: mark %.3f ms\n", mark * 1e3);
    for (int n = 1; n <= max; n++) {
        double one = 1e30, steps = 1e30, back = 1e30;
        for (int r = 0; r < 3; r++) {
            if (qhx_session_restore(s, snap) || qhx_session_mark(s)) goto fail;
            BEST(one, if (qhx_session_eval(s, ids + 128 - n - 1, n + 1, QHX_EVAL_STEPWISE, NULL, NULL)) goto fail);
            BEST(back, if (qhx_session_rewind(s, 129)) goto fail); /* the first draft rejected */
            if (qhx_session_restore(s, snap)) goto fail;
            BEST(steps, for (int k = 0; k <= n; k++) if (qhx_session_eval(s, ids + 128 - n - 1 + k, 1, QHX_EVAL_STEPWISE, NULL, NULL)) goto fail);
        }
        if (report)
            json_array_append_new(verify, json_pack("{s:i, s:o, s:o, s:o}", "drafts", n, "verify_ms", num(one * 1e3, 2), "steps_ms",
                                                    num(steps * 1e3, 2), "rewind_ms", num(back * 1e3, 3)));
        else fprintf(stderr, "    verify 1 + %d tokens: %8.1f ms; %d decode steps: %8.1f ms; verify / steps %.3f; rewind %.2f ms\n", n,
                     one * 1e3, n + 1, steps * 1e3, one / steps, back * 1e3);
    }
    /* the MTP head: drafting n tokens after a decode step (its first step takes in that position) */
    for (int n = 1; mtp && n <= max; n++) {
        double t = 1e30;
        for (int r = 0; r < 3; r++) {
            if (qhx_session_restore(s, snap) || qhx_session_eval(s, ids + 1, 1, QHX_EVAL_STEPWISE, NULL, NULL)) goto fail;
            const double dt = qhx_bench_mtp_draft(s, ids[2], n);
            if (dt < 0) goto fail;
            t = dt < t ? dt : t;
        }
        if (report) json_array_append_new(drafts, json_pack("{s:i, s:o}", "drafts", n, "ms", num(t * 1e3, 2)));
        else fprintf(stderr, "    MTP head: %d draft%s %8.1f ms\n", n, n > 1 ? "s:" : ": ", t * 1e3);
    }
    if (report && mtp) json_object_set(json_object_get(report, "speculative"), "mtp_draft", drafts);
    rc = 0;
fail:
    if (rc) api_error();
    json_decref(verify);
    json_decref(drafts);
    qhx_snapshot_free(snap);
    return rc;
}

/* n greedy decode steps of s from *tok, their seconds added to *sec */
static qhx_status decode_steps(qhx_session *s, int32_t *tok, int n, float *last, int vocab, double *sec) {
    const double t0 = now_s();
    for (int j = 0; j < n; j++) {
        const qhx_status st = qhx_session_eval(s, tok, 1, QHX_EVAL_STEPWISE, NULL, last);
        if (st) return st;
        *tok = qhx_argmax(last, vocab);
    }
    *sec += now_s() - t0;
    return QHX_OK;
}

/* Prefill of 512 tokens and decode after `depth` tokens of context (evaluated untimed, in pieces of
 * 512 as a server would), from one snapshot, with the caches already grown to hold them: what long
 * contexts cost. The depths rise, each context grown from the last, so the deepest is filled once.
 * Decode at a depth alternates, 8 steps at a time, with decode from an empty context in a second
 * session: the host's bandwidth moves by a fifth from minute to minute here, and the deepest depth
 * is measured many minutes after the first, so the ratio of the two is taken over the same seconds. */
static int bench_depths(qhx_model *m, qhx_session *s, const int32_t *depths, int n, int n_decode, json_t *report) {
    enum { SEGMENT = 8 };
    qhx_model_info in;
    qhx_model_get_info(m, &in);
    json_t *list = json_array();
    float *last = malloc(sizeof(float) * (size_t)in.vocab_size);
    qhx_session *ref = NULL; /* decode from an empty context, alternated with each depth's */
    int32_t piece[512];
    uint64_t seed = 7;
    int rc = 1;
    if (!last || !list) goto done;
    if (qhx_session_new(m, &ref)) { api_error(); goto done; }
    if (report) json_object_set(report, "depths", list);
    qhx_session_reset(s);
    for (int i = 0; i < n; i++) {
        qhx_snapshot *snap = NULL;
        for (int at = qhx_session_pos(s); at < depths[i]; at += 512) {
            const int k = depths[i] - at < 512 ? depths[i] - at : 512;
            for (int j = 0; j < k; j++) seed = seed * 6364136223846793005ull + 1442695040888963407ull, piece[j] = (int32_t)((seed >> 33) % (uint64_t)in.vocab_size);
            if (qhx_session_eval(s, piece, k, QHX_EVAL_SEQUENCE, NULL, NULL)) { api_error(); goto done; }
        }
        if (qhx_session_snapshot(s, &snap)) { api_error(); goto done; }
        for (int j = 0; j < 512; j++) seed = seed * 6364136223846793005ull + 1442695040888963407ull, piece[j] = (int32_t)((seed >> 33) % (uint64_t)in.vocab_size);
        /* the 512 tokens once untimed, so the KV caches have grown to hold them: a session grows
         * them once a doubling, which the timed run would otherwise charge to these 512 tokens
         * alone (llama.cpp allocates its whole context up front) */
        if (qhx_session_eval(s, piece, 512, QHX_EVAL_SEQUENCE, NULL, NULL) || qhx_session_restore(s, snap)) {
            api_error();
            qhx_snapshot_free(snap);
            goto done;
        }
        double t0 = now_s();
        qhx_status st = qhx_session_eval(s, piece, 512, QHX_EVAL_SEQUENCE, NULL, NULL);
        const double pre = 512 / (now_s() - t0);
        if (!st) st = qhx_session_restore(s, snap);
        int32_t tok = piece[0], tok0 = piece[0];
        double at_depth = 0, at_zero = 0;
        qhx_session_reset(ref);
        for (int j = 0; j < n_decode && !st; j += SEGMENT) {
            const int k = n_decode - j < SEGMENT ? n_decode - j : SEGMENT;
            st = decode_steps(s, &tok, k, last, in.vocab_size, &at_depth);
            if (!st) st = decode_steps(ref, &tok0, k, last, in.vocab_size, &at_zero);
        }
        const double dec = n_decode / at_depth, dec0 = n_decode / at_zero;
        if (!st) st = qhx_session_restore(s, snap); /* the context, for the next depth to grow */
        qhx_snapshot_free(snap);
        if (st) { api_error(); goto done; }
        /* what one session (a server slot) holds at this depth plus the 512: states and KV rows */
        const double mb = ((double)in.state_bytes + (double)in.kv_bytes_per_token * (depths[i] + 512)) / 1e6;
        if (report)
            json_array_append_new(list, json_pack("{s:i, s:o, s:o, s:o, s:o, s:o}", "depth", depths[i], "prefill_512_tok_s", num(pre, 2),
                                                  "decode_tok_s", num(dec, 2), "decode_depth0_tok_s", num(dec0, 2), "decode_vs_depth0",
                                                  num(dec / dec0, 3), "session_mb", num(mb, 1)));
        else fprintf(stderr, "  at depth %6d: prefill of 512 tokens %8.1f tok/s, decode %.2f tok/s (%.3f of the %.2f at depth 0 alternated with it); the session holds %.1f MB\n",
                     depths[i], pre, dec, dec / dec0, dec0, mb);
    }
    rc = 0;
done:
    json_decref(list);
    free(last);
    qhx_session_free(ref);
    return rc;
}

static int cmp_double(const void *a, const void *b) { return (*(const double *)a > *(const double *)b) - (*(const double *)a < *(const double *)b); }

int cmd_bench(int argc, char **argv) {
    opts o = {.decode = 128, .prompts = "128,512,1024"};
    if (parse_common(argc, argv, &o, "-m --prompts --decode --depth --json --draft --draft-max" RUNTIME_FLAGS)) return 2;
    if (o.help) return fputs(bench_help, stdout), 0;
    const int json = o.json;
    const long long n_decode = o.decode;
    const char *sizes_arg = o.prompts;
    if (!o.model || o.prompt) return die("needs one MODEL (see qhx bench --help)"), 2;
    int32_t *sizes, *depths = NULL;
    int n_sizes, n_depths = 0;
    if (parse_ids("--prompts", sizes_arg, &sizes, &n_sizes)) return 2;
    if (o.depths && parse_ids("--depth", o.depths, &depths, &n_depths)) return free(sizes), 2;
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    qhx_session *s = NULL;
    int32_t *ids = NULL;
    json_t *report = NULL;
    int rc = 1;
    if (open_model(&o, &rt, &m)) goto done;
    qhx_model_info in;
    qhx_model_get_info(m, &in);
    int longest = 128;
    for (int i = 0; i < n_sizes; i++) {
        if (sizes[i] < 1 || sizes[i] > in.max_context) { die("--prompts: %d is not in [1, %d]", sizes[i], in.max_context); goto done; }
        longest = sizes[i] > longest ? sizes[i] : longest;
    }
    if (128 + n_decode > in.max_context) { die("--decode %lld: 128 + N exceeds the context of %d", n_decode, in.max_context); goto done; }
    for (int i = 0; i < n_depths; i++)
        if (i > 0 && depths[i] <= depths[i - 1]) {
            die("--depth: the depths must rise (%d after %d)", depths[i], depths[i - 1]);
            goto done;
        } else if ((long long)depths[i] + 512 > in.max_context) {
            die("--depth %d: 512 more tokens exceed the context of %d (forge with --context-len)", depths[i], in.max_context);
            goto done;
        }
    ids = malloc(sizeof(int32_t) * (size_t)longest);
    float *last = malloc(sizeof(float) * (size_t)in.vocab_size);
    if (!ids || !last) { free(last); die("out of memory"); goto done; }
    uint64_t seed = 42;
    for (int i = 0; i < longest; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((seed >> 33) % (uint64_t)in.vocab_size);
    }
    if (qhx_session_new(m, &s)) { free(last); api_error(); goto done; }
    if (!json) fprintf(stderr, "bench: %s on %s kernels, %d threads\n", o.model, qhx_runtime_kernels(rt), qhx_runtime_threads(rt));
    double *pre = calloc((size_t)n_sizes, sizeof *pre), ttft = 0;
    int ttft_size = 0;
    for (int i = 0; i < n_sizes; i++) {
        qhx_session_reset(s);
        const double t0 = now_s();
        if (qhx_session_eval(s, ids, sizes[i], QHX_EVAL_SEQUENCE, NULL, last)) { free(last), free(pre); api_error(); goto done; }
        const double dt = now_s() - t0;
        pre[i] = sizes[i] / dt;
        if (sizes[i] <= 512 && sizes[i] >= ttft_size) ttft = dt, ttft_size = sizes[i];
        if (!json) fprintf(stderr, "  prefill %5d tokens: %8.1f tok/s (%.2f s)\n", sizes[i], pre[i], dt);
    }
    qhx_session_reset(s);
    /* Decode in segments of 16 tokens, each followed by one read pass over the weights: the host
     * is shared, so its bandwidth moves while decode runs, and a probe at another moment measures
     * another machine. The fraction compares the two averaged over the same stretch of time; the
     * best of a few passes over fresh memory, a peak rather than an average, is reported beside.
     * On a host whose bandwidth swings within seconds, the median of the segments' own fractions
     * is the steadier figure. */
    double dec_s = 0, seg_s = 0, *seg_frac = malloc(sizeof(double) * (size_t)(n_decode / 16 + 1));
    int n_seg = 0, seg_tokens = 0;
    qhx_read_probe probe = {0, 0};
    if (!seg_frac) { free(last), free(pre); die("out of memory"); goto done; }
    if (qhx_session_eval(s, ids, 128, QHX_EVAL_SEQUENCE, NULL, last)) { free(last), free(pre); api_error(); goto done; }
    for (int i = 0; i < n_decode; i++) {
        int32_t best = qhx_argmax(last, in.vocab_size); /* greedy: the next input, as in generation */
        const double t0 = now_s();
        if (qhx_session_eval(s, &best, 1, QHX_EVAL_STEPWISE, NULL, last)) { free(last), free(pre); api_error(); goto done; }
        const double dt = now_s() - t0;
        dec_s += dt, seg_s += dt, seg_tokens++;
        if (i % 16 == 15 || i == n_decode - 1) {
            const qhx_read_probe p = qhx_model_read_weights(m);
            probe.bytes += p.bytes, probe.seconds += p.seconds;
            seg_frac[n_seg++] = (double)seg_tokens * (double)in.decode_bytes_per_token / seg_s / ((double)p.bytes / p.seconds);
            seg_s = 0, seg_tokens = 0;
        }
    }
    qsort(seg_frac, (size_t)n_seg, sizeof *seg_frac, cmp_double);
    const double frac_median = n_seg % 2 ? seg_frac[n_seg / 2] : (seg_frac[n_seg / 2 - 1] + seg_frac[n_seg / 2]) / 2;
    free(seg_frac);
    const double dec = n_decode / dec_s;
    free(last);
    struct rusage ru; /* before the peak probe, which allocates 1 GiB of its own */
    getrusage(RUSAGE_SELF, &ru);
    const double rss_mb = ru.ru_maxrss / 1024.0;
    const double bw = probe.bytes / probe.seconds / 1e9, peak = qhx_runtime_read_bandwidth(rt, 0);
    const double gbs = dec * in.decode_bytes_per_token / 1e9;
    /* Besides the weights, a decode step reads and writes back every delta-rule state and conv
     * FIFO, reads the KV cache of the positions before it and writes its own: bytes that cross
     * the same memory bus (the 4B shape's states alone are 48 MiB). Positions 128 .. 128 + N - 1. */
    const uint64_t state_per_token = 2 * in.state_bytes + in.kv_bytes_per_token * (uint64_t)(128 + (n_decode + 1) / 2);
    const double moved_gbs = dec * (double)(in.decode_bytes_per_token + state_per_token) / 1e9;
    if (json) {
        json_t *prefill = json_array();
        for (int i = 0; i < n_sizes; i++) json_array_append_new(prefill, json_pack("{s:i, s:o}", "tokens", sizes[i], "tok_s", num(pre[i], 2)));
        report = json_pack("{s:s, s:s, s:i, s:o, s:{s:I, s:o}, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:o, s:o, s:o, s:i, s:o, s:o}", "model", o.model,
                           "kernels", qhx_runtime_kernels(rt), "threads", qhx_runtime_threads(rt), "prefill", prefill, "decode",
                           "tokens", (json_int_t)n_decode, "tok_s", num(dec, 2), "weight_bytes_per_token",
                           (json_int_t)in.decode_bytes_per_token, "weight_gb_s", num(gbs, 2), "bandwidth_gb_s", num(bw, 2),
                           "bandwidth_frac", num(gbs / bw, 3), "bandwidth_frac_median", num(frac_median, 3), "bandwidth_peak_gb_s", num(peak, 2), "bandwidth_peak_frac",
                           num(gbs / peak, 3), "state_bytes_per_token", (json_int_t)state_per_token, "moved_gb_s", num(moved_gbs, 2),
                           "moved_peak_frac", num(moved_gbs / peak, 3), "ttft_ms", num(ttft * 1e3, 1), "ttft_prompt_tokens", ttft_size, "peak_rss_mb",
                           num(rss_mb, 1), "mapped_weights_mb", num(in.weight_bytes / 1e6, 1));
        if (!report) { free(pre); die("out of memory"); goto done; }
    } else {
        fprintf(stderr, "  decode %lld tokens: %.2f tok/s; %.1f MB of weights per token = %.2f GB/s, %.0f %% of the %.2f GB/s a read loop\n"
                        "    got over the same weights between decode segments (median of the segments: %.0f %%; %.0f %% of the %.2f GB/s\n"
                        "    best pass over fresh memory)\n",
                n_decode, dec, in.decode_bytes_per_token / 1e6, gbs, 100 * gbs / bw, bw, 100 * frac_median, 100 * gbs / peak, peak);
        fprintf(stderr, "  with the states and KV cache it reads and writes (%.1f MB a token): %.2f GB/s, %.0f %% of that best pass\n",
                state_per_token / 1e6, moved_gbs, 100 * moved_gbs / peak);
        fprintf(stderr, "  time to first token (%d-token prompt): %.1f ms; peak RSS %.1f MB (weights mapped %.1f MB)\n", ttft_size,
                ttft * 1e3, rss_mb, in.weight_bytes / 1e6);
    }
    free(pre);
    if (n_depths && bench_depths(m, s, depths, n_depths, n_decode < 64 ? (int)n_decode : 64, report)) goto done;
    if (o.gen.draft && bench_verify(m, s, ids, o.gen.draft_max ? o.gen.draft_max : 8, o.gen.draft == QHX_DRAFT_MTP, report)) goto done;
    if (report && (json_dumpf(report, stdout, JSON_REAL_PRECISION(15)) || putchar('\n') == EOF)) { die("stdout: write error"); goto done; }
    rc = 0;
done:
    json_decref(report);
    free(sizes);
    free(depths);
    free(ids);
    close_model(rt, m, s);
    return rc;
}
