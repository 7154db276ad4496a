/* base/file.c - see file.h. */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *ms_file_kind(unsigned mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

static ms_status open_error(const char *path, int e, ms_err *err) {
    if (e == ENXIO)   /* a socket, or a device with nothing behind it */
        return ms_err_set(err, MS_E_MODEL, "%.300s: not a regular file (cannot be opened: %s)",
                          path, strerror(e));
    return ms_err_set(err, MS_E_IO, "%.300s: cannot open: %s", path, strerror(e));
}

ms_status ms_file_check_fd(int fd, const char *path, int64_t max_bytes, int64_t *size, ms_err *err) {
    *size = 0;
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return ms_err_set(err, MS_E_IO, "%.300s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return ms_err_set(err, MS_E_MODEL, "%.300s: is %s, expected a regular file", path,
                          ms_file_kind((unsigned)sb.st_mode));
    if ((int64_t)sb.st_size > max_bytes)
        return ms_err_set(err, MS_E_MODEL, "%.300s: %lld bytes, more than the %lld allowed", path,
                          (long long)sb.st_size, (long long)max_bytes);
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || ((fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
        return ms_err_set(err, MS_E_IO, "%.300s: fcntl: %s", path, strerror(errno));
    *size = (int64_t)sb.st_size;
    return MS_OK;
}

ms_status ms_file_open(const char *path, int64_t max_bytes, int *fd, int64_t *size, ms_err *err) {
    *fd = -1;
    *size = 0;
    int f = open(path, MS_FILE_OPEN_FLAGS);
    if (f < 0) return open_error(path, errno, err);
    ms_status st = ms_file_check_fd(f, path, max_bytes, size, err);
    if (st != MS_OK) {
        close(f);
        return st;
    }
    *fd = f;
    return MS_OK;
}

ms_status ms_file_check_regular(const char *path, ms_err *err) {
    int fd;
    int64_t size;
    ms_status st = ms_file_open(path, INT64_MAX, &fd, &size, err);
    if (st == MS_OK) close(fd);
    return st;
}

ms_status ms_file_pread_full(int fd, void *buf, size_t n, int64_t off, const char *path, ms_err *err) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + (int64_t)got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return ms_err_set(err, MS_E_IO, "%.300s: read failed: %s", path, strerror(errno));
        if (r == 0)
            return ms_err_set(err, MS_E_IO, "%.300s: short read: %zu of %zu bytes at offset %lld",
                              path, got, n, (long long)off);
        got += (size_t)r;
    }
    return MS_OK;
}

ms_status ms_file_read(const char *path, int64_t max_bytes, char **out, size_t *n, ms_err *err) {
    *out = NULL;
    *n = 0;
    int fd;
    int64_t size;
    ms_status st = ms_file_open(path, max_bytes, &fd, &size, err);
    if (st != MS_OK) return st;
    char *buf = malloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        return ms_err_set(err, MS_E_NOMEM, "%.300s: cannot allocate %lld bytes", path, (long long)size + 1);
    }
    st = ms_file_pread_full(fd, buf, (size_t)size, 0, path, err);
    close(fd);
    if (st != MS_OK) {
        free(buf);
        return st;
    }
    buf[size] = '\0';
    *out = buf;
    *n = (size_t)size;
    return MS_OK;
}
