/* engine/pack.c - ms_pack_checkpoint (include/moestream.h): write the packed
 * trunk of a checkpoint (format/pack.h).
 *
 * The regions to pack are the model's TRUNK regions, exactly as the engine
 * declares them (the model's binding against a store opened with no budget):
 * the store then reads each from the shards, verified with the sidecar (a
 * pack needs one: it is checked against it at every read), and hands it to
 * the pack writer (ms_pack_write_trunk, engine/pack_write.h). Nothing is planned or started, so
 * this needs no more memory than the largest region.
 */
#include "moestream.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "engine/pack_write.h"
#include "format/config.h"
#include "format/pack.h"
#include "format/safetensors.h"
#include "format/sums.h"
#include "model/model.h"
#include "store/store.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

ms_status ms_pack_checkpoint(const char *model_dir, const char *pack_path, const char *sums_path,
                             ms_log_fn log, void *log_user, ms_log_level log_level,
                             ms_pack_result *out, char *errbuf, size_t errbuf_len) {
    memset(out, 0, sizeof *out);
    const ms_logger lg = { log, log_user, log_level };
    ms_err err;
    ms_err_clear(&err);
    const double t0 = ms_now_s();
    ms_config cfg;
    ms_ckpt *ck = NULL;
    ms_sums *sums = NULL;
    ms_store *store = NULL;
    ms_model m;
    int bound = 0;
    char path[4200], sp[4200];
    ms_status st;
    if (!model_dir) { st = ms_err_set(&err, MS_E_USAGE, "no model directory given"); goto done; }
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    if ((st = ms_config_load(path, &cfg, &err)) != MS_OK) goto done;
    if ((st = ms_ckpt_open(model_dir, &ck, &err)) != MS_OK) goto done;
    snprintf(sp, sizeof sp, "%s/%s", model_dir, MS_SUMS_FILE);
    if (!sums_path && access(sp, F_OK) != 0) {
        st = ms_err_set(&err, MS_E_USAGE, "no %s: run 'moestream verify %s' first (a packed trunk is"
                        " checked against the checksums at every read)", sp, model_dir);
        goto done;
    }
    if ((st = ms_sums_load(sums_path ? sums_path : sp, ck, &sums, &err)) != MS_OK) goto done;
    if ((st = ms_sums_check_meta(sums, model_dir, &lg, NULL, &err)) != MS_OK) goto done;
    ms_store_params p = ms_store_default_params();
    p.log = &lg;
    p.sums = sums;
    if ((st = ms_store_open(&p, ck, &store, &err)) != MS_OK) goto done;
    m.kern = NULL;
    st = ms_model_bind(&m, &cfg, ck, store, &err);
    bound = 1;
    if (st != MS_OK) goto done;
    snprintf(path, sizeof path, "%s/%s", model_dir, MS_PACK_FILE);
    if (pack_path) snprintf(path, sizeof path, "%s", pack_path);
    ms_log(&lg, MS_LOG_INFO, "packing the trunk of %s into %s", model_dir, path);
    st = ms_pack_write_trunk(store, path, ms_sums_table_hash(ck), &lg, out, &err);
done:
    out->seconds = ms_now_s() - t0;
    if (st != MS_OK && errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "%s", err.msg);
    if (bound) ms_model_free(&m);
    ms_store_close(store);
    ms_sums_free(sums);
    ms_ckpt_close(ck);
    return st;
}
