/* Power-cut shim for a test: writes to a file whose name contains ".incr.aof" are held in
   this process's memory until fsync/fdatasync (or close) of that file, so a SIGKILL loses
   exactly what the server had not fsynced, as a power cut or OS crash would. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define MAXFD 4096
static char *buf[MAXFD];
static size_t len[MAXFD], cap[MAXFD];
static int held[MAXFD];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *real(const char *name) { return dlsym(RTLD_NEXT, name); }

static void note(const char *path) {
    const char *log = getenv("POWERCUT_LOG");
    if (!log) return;
    FILE *f = fopen(log, "a");
    if (f) { fprintf(f, "held %s\n", path); fclose(f); }
}

static int track(int fd, const char *path) {
    if (fd >= 0 && fd < MAXFD && path && strstr(path, ".incr.aof")) {
        pthread_mutex_lock(&mu);
        held[fd] = 1; len[fd] = 0;
        pthread_mutex_unlock(&mu);
        note(path);
    }
    return fd;
}

static int mode_of(int flags, va_list ap) {
    return (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list ap; va_start(ap, flags); int mode = mode_of(flags, ap); va_end(ap);
    int (*f)(const char *, int, ...) = real("open");
    return track(f(path, flags, mode), path);
}
int open64(const char *path, int flags, ...) {
    va_list ap; va_start(ap, flags); int mode = mode_of(flags, ap); va_end(ap);
    int (*f)(const char *, int, ...) = real("open64");
    return track(f(path, flags, mode), path);
}
int openat(int dir, const char *path, int flags, ...) {
    va_list ap; va_start(ap, flags); int mode = mode_of(flags, ap); va_end(ap);
    int (*f)(int, const char *, int, ...) = real("openat");
    return track(f(dir, path, flags, mode), path);
}

static ssize_t raw_write(int fd, const void *p, size_t n) {
    static ssize_t (*w)(int, const void *, size_t);
    if (!w) w = real("write");
    return w(fd, p, n);
}

/* with mu held */
static void spill(int fd) {
    size_t off = 0;
    while (off < len[fd]) {
        ssize_t k = raw_write(fd, buf[fd] + off, len[fd] - off);
        if (k <= 0) break;
        off += (size_t)k;
    }
    len[fd] = 0;
}

ssize_t write(int fd, const void *p, size_t n) {
    if (fd >= 0 && fd < MAXFD && held[fd]) {
        pthread_mutex_lock(&mu);
        if (held[fd]) {
            if (len[fd] + n > cap[fd]) {
                cap[fd] = (len[fd] + n) * 2;
                buf[fd] = realloc(buf[fd], cap[fd]);
            }
            memcpy(buf[fd] + len[fd], p, n);
            len[fd] += n;
            pthread_mutex_unlock(&mu);
            return (ssize_t)n;
        }
        pthread_mutex_unlock(&mu);
    }
    return raw_write(fd, p, n);
}

static void flush_fd(int fd) {
    if (fd >= 0 && fd < MAXFD && held[fd]) {
        pthread_mutex_lock(&mu);
        spill(fd);
        pthread_mutex_unlock(&mu);
    }
}

int fsync(int fd) { flush_fd(fd); int (*f)(int) = real("fsync"); return f(fd); }
int fdatasync(int fd) { flush_fd(fd); int (*f)(int) = real("fdatasync"); return f(fd); }
int close(int fd) {
    if (fd >= 0 && fd < MAXFD && held[fd]) {
        pthread_mutex_lock(&mu);
        spill(fd);
        held[fd] = 0;
        pthread_mutex_unlock(&mu);
    }
    int (*f)(int) = real("close");
    return f(fd);
}
