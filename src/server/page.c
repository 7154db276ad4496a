/* server/page.c - GET /: the chat page, one static HTML file (inline CSS and
 * JavaScript) compiled into the binary.
 *
 * Owns: the response for / (and /index.html), and GET /v1/server, the small
 *   JSON the page's header line shows (model, context, the plan's budget). The page's source is
 *   src/server/page/index.html; the Makefile turns it into a byte array
 *   ($(BUILD)/gen/page_html.h) so the binary needs no file at run time.
 * Invariants: the page makes no request outside this server: the
 *   Content-Security-Policy sent with it allows only same-origin fetches and
 *   the page's own inline script and style (no CDN, no fonts, no images).
 * Does not: authenticate: the page is public; its API calls carry the key the
 *   user types (kept in the browser's localStorage), as any client's would.
 */
#include "server/srv.h"

#include <microhttpd.h>

#include "page_html.h"

char *srv_page_info(srv *s) {
    json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:b}", "model", s->o.model_name, "context_length",
                          (json_int_t)s->info.max_context, "ram_budget", (json_int_t)s->ram_budget,
                          "parallel", (json_int_t)s->o.c.parallel, "thinking", s->o.thinking);
    char *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return out;
}

int srv_page_respond(srv *s, struct MHD_Connection *c, int *status, const char *cors_origin) {
    (void)s;
    struct MHD_Response *r = MHD_create_response_from_buffer(sizeof page_html - 1, (void *)page_html,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (cors_origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", cors_origin);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    *status = 200;
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}
