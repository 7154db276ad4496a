/* engine/split.c - where a pipeline's stages begin: the layer split that
 * balances each stage's reads per token (ms_pipe_split) and its use on a
 * model or a --stages list (ms_pipe_split_model).
 *
 * Owns: nothing (pure functions over layer costs).
 * Used by: the engine at open (which layers this process binds), `plan
 * --pipeline N` (engine/plan.c) and tests/test_pipe.c. No MPI here: a build
 * without MPI (make MPI=0) still plans pipelines.
 * Does not: talk to other processes (engine/pipe.c does, above the engine).
 */
#include "engine/engine_int.h"

#include <stdint.h>
#include <stdlib.h>

int ms_pipe_split(const int64_t *cost, int L, int64_t head_cost, int n, int *start) {
    if (n < 1 || n > L) return -1;
    /* suf[s][i]: the smallest largest cost of layers [i, L) in s stages (no
       head); then the largest stage cost of the best split is
       min over j of max(head + [0, j), suf[n - 1][j]), and the boundaries are
       taken one at a time, each the first that still reaches it */
    int64_t *pre = calloc((size_t)L + 1, sizeof *pre);
    int64_t *suf = malloc((size_t)(n + 1) * (size_t)(L + 1) * sizeof *suf);
    if (!pre || !suf) { free(pre); free(suf); return -1; }
    for (int i = 0; i < L; i++) pre[i + 1] = pre[i] + cost[i];
#define S(s, i) suf[(size_t)(s) * (size_t)(L + 1) + (size_t)(i)]
    for (int i = 0; i <= L; i++) {
        S(0, i) = i == L ? 0 : INT64_MAX;
        S(1, i) = i < L ? pre[L] - pre[i] : INT64_MAX;
    }
    for (int s = 2; s <= n; s++)
        for (int i = 0; i <= L; i++) {
            S(s, i) = INT64_MAX;
            for (int j = i + 1; j <= L - s + 1; j++) {
                const int64_t here = pre[j] - pre[i], v = here > S(s - 1, j) ? here : S(s - 1, j);
                if (v < S(s, i)) S(s, i) = v;
            }
        }
    int64_t best = INT64_MAX;
    for (int j = 1; j <= L - n + 1; j++) {
        const int64_t first = head_cost + pre[j], v = first > S(n - 1, j) ? first : S(n - 1, j);
        if (v < best) best = v;
    }
    start[0] = 0;
    start[n] = L;
    for (int k = 1; k < n; k++) {
        const int64_t extra = k == 1 ? head_cost : 0;
        int j = start[k - 1] + 1;
        while (extra + pre[j] - pre[start[k - 1]] > best || S(n - k, j) > best) j++;
        start[k] = j;
    }
#undef S
    free(pre);
    free(suf);
    return 0;
}

ms_status ms_pipe_split_model(const ms_model *dry, const char *spec, int n, int *start, ms_err *err) {
    const int L = dry->n_layer;
    start[0] = 0;
    start[1] = L;
    if (n == 1) return MS_OK;
    if (n < 1 || n > MS_MAX_STAGES || n > L)
        return ms_err_set(err, MS_E_USAGE, "%d pipeline stages for %d layers: at most one stage per layer, and %d stages",
                          n, L, MS_MAX_STAGES);
    if (spec) {
        const char *p = spec;
        int k = 1;
        while (*p) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || (*end && *end != ',') || k >= n || v <= start[k - 1] || v >= L)
                return ms_err_set(err, MS_E_USAGE, "--stages '%s': wants %d increasing layer indices in [1, %d)"
                                  " where stages 1..%d begin", spec, n - 1, L, n - 1);
            start[k++] = (int)v;
            p = *end ? end + 1 : end;
        }
        if (k != n)
            return ms_err_set(err, MS_E_USAGE, "--stages '%s': %d stages need %d layer indices", spec, n, n - 1);
        start[n] = L;
        return MS_OK;
    }
    /* bytes per token at the floor: each layer's trunk, its k experts; the
       head's final norms and lm_head (embedding rows are a few KB a token) */
    int64_t *cost = calloc((size_t)L, sizeof *cost), head = 0;
    if (!cost) return ms_err_set(err, MS_E_NOMEM, "out of memory");
    for (int il = 0; il < L; il++) {
        const ms_layer *Ly = &dry->layers[il];
        cost[il] = dry->plan_regions[Ly->attn_region].bytes + dry->plan_regions[Ly->ffn_region].bytes;
        if (!Ly->is_dense) cost[il] += dry->cfg.num_experts_per_token * dry->expert_bytes;
    }
    head = dry->plan_regions[dry->final_region].bytes;
    for (int ic = 0; ic < dry->n_lm_chunks; ic++) head += dry->plan_regions[dry->lm_region[ic]].bytes;
    const int r = ms_pipe_split(cost, L, head, n, start);
    free(cost);
    return r == 0 ? MS_OK : ms_err_set(err, MS_E_NOMEM, "out of memory");
}
