/* tests/test_file.c - the checked, bounded reader of metadata files
 * (base/file.h).
 *
 * In a temporary directory:
 *   - a regular file and a symlink to it read whole, NUL-terminated, at and
 *     below the limit; an empty file reads as "";
 *   - one byte over the limit is MS_E_MODEL naming the path and both sizes,
 *     and a sparse 1 GiB file is refused the same way (nothing allocated);
 *   - a FIFO with no writer, a directory, /dev/zero and a symlink to it are
 *     MS_E_MODEL naming the path and what it is, immediately (the FIFO open
 *     would block without O_NONBLOCK: the test would hang, not fail);
 *   - a missing file is MS_E_IO with the errno text;
 *   - ms_file_check_regular says the same without a size limit, and
 *     ms_file_pread_full reports a short read with the offset.
 */
#include "check.h"
#include "base/file.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(0, "cannot write %s", path); return; }
    fputs(text, f);
    fclose(f);
}

/* ms_file_read(path, limit) must fail with `st`, the message holding path and `detail` */
static void expect_refused(const char *path, int64_t limit, ms_status want, const char *detail) {
    ms_err e;
    ms_err_clear(&e);
    char *buf = (char *)1;
    size_t n = 7;
    ms_status st = ms_file_read(path, limit, &buf, &n, &e);
    CHECK(st == want, "%s: status %d, want %d ('%s')", path, st, want, e.msg);
    CHECK(buf == NULL && n == 0, "%s: output not cleared on failure", path);
    CHECK(has(e.msg, path) && has(e.msg, detail), "%s: '%s' lacks '%s'", path, e.msg, detail);
}

int main(void) {
    char dir[] = "/tmp/ms_test_file_XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return CHECK_DONE("test_file"); }
    char p[512], q[512];
    ms_err e;

    snprintf(p, sizeof p, "%s/config.json", dir);
    write_file(p, "{\"a\": 1}");
    snprintf(q, sizeof q, "%s/link.json", dir);
    CHECK(symlink(p, q) == 0, "symlink");
    for (int i = 0; i < 2; i++) {
        char *buf = NULL;
        size_t n = 0;
        ms_err_clear(&e);
        ms_status st = ms_file_read(i ? q : p, 8, &buf, &n, &e);
        CHECK(st == MS_OK && n == 8 && buf && memcmp(buf, "{\"a\": 1}", 9) == 0,
              "read %s: %d '%s'", i ? "the symlink" : "the file", st, e.msg);
        free(buf);
    }
    expect_refused(p, 7, MS_E_MODEL, "8 bytes, more than the 7 allowed");

    snprintf(p, sizeof p, "%s/empty", dir);
    write_file(p, "");
    {
        char *buf = NULL;
        size_t n = 1;
        ms_err_clear(&e);
        CHECK(ms_file_read(p, 0, &buf, &n, &e) == MS_OK && n == 0 && buf && buf[0] == '\0', "empty file");
        free(buf);
    }

    snprintf(p, sizeof p, "%s/tiktoken.model", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)1 << 30) == 0, "sparse file");
    if (fd >= 0) close(fd);
    expect_refused(p, 64LL << 20, MS_E_MODEL, "1073741824 bytes, more than the 67108864 allowed");

    snprintf(p, sizeof p, "%s/fifo", dir);
    CHECK(mkfifo(p, 0644) == 0, "mkfifo");
    expect_refused(p, 1 << 20, MS_E_MODEL, "is a FIFO, expected a regular file");
    ms_err_clear(&e);
    CHECK(ms_file_check_regular(p, &e) == MS_E_MODEL && has(e.msg, "a FIFO"), "check FIFO: '%s'", e.msg);

    snprintf(p, sizeof p, "%s/sub", dir);
    CHECK(mkdir(p, 0755) == 0, "mkdir");
    expect_refused(p, 1 << 20, MS_E_MODEL, "is a directory");

    expect_refused("/dev/zero", 1 << 20, MS_E_MODEL, "is a character device");
    snprintf(p, sizeof p, "%s/zero", dir);
    CHECK(symlink("/dev/zero", p) == 0, "symlink to /dev/zero");
    expect_refused(p, 1 << 20, MS_E_MODEL, "is a character device");
    ms_err_clear(&e);
    CHECK(ms_file_check_regular(p, &e) == MS_E_MODEL, "check /dev/zero: '%s'", e.msg);

    snprintf(p, sizeof p, "%s/missing", dir);
    expect_refused(p, 1 << 20, MS_E_IO, "No such file");

    snprintf(p, sizeof p, "%s/config.json", dir);
    ms_err_clear(&e);
    CHECK(ms_file_check_regular(p, &e) == MS_OK, "check a regular file: '%s'", e.msg);
    int64_t size = -1;
    ms_err_clear(&e);
    CHECK(ms_file_open(p, 100, &fd, &size, &e) == MS_OK && size == 8, "open: '%s'", e.msg);
    if (fd >= 0) {
        char b[16];
        CHECK(ms_file_pread_full(fd, b, 4, 4, p, &e) == MS_OK && memcmp(b, " 1}", 3) != 0 &&
              memcmp(b, ": 1}", 4) == 0, "pread_full");
        ms_err_clear(&e);
        CHECK(ms_file_pread_full(fd, b, 8, 4, p, &e) == MS_E_IO && has(e.msg, "short read: 4 of 8 bytes at offset 4"),
              "short read: '%s'", e.msg);
        close(fd);
    }

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return CHECK_DONE("test_file");
}
