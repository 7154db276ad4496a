/* server/server.h - `moestream serve`: the OpenAI-compatible HTTP server.
 *
 * The one entry point the moestream program's dispatcher calls. Everything
 * else in src/server/ is internal (see server/srv.h). The server is a
 * program, not library code: it owns the process (signals, exit codes,
 * stderr, the environment variable MOESTREAM_API_KEY).
 */
#ifndef MS_SERVER_SERVER_H
#define MS_SERVER_SERVER_H

/* Run the server. argv holds the words after "serve":
 *   MODEL_DIR [--ram SIZE] [--host 127.0.0.1] [--port 8080] [--api-key K] ...
 * (`moestream serve --help` lists every option). Blocks until SIGTERM or
 * SIGINT, then stops accepting connections, lets in-flight responses finish
 * (bounded by --shutdown-timeout) and returns. Returns the process exit code:
 * 0 after a clean shutdown, 1 runtime failure (cannot bind, cannot start a
 * thread), 2 usage error or unreadable model. Not reentrant: one server per
 * process. */
int ms_serve_main(int argc, char **argv);

#endif
