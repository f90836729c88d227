// SPDX-License-Identifier: MIT
/*
 * libvnpu_trace.so: an LD_PRELOAD interposer of ioctl() for `accel trace`.
 *
 * Every ioctl of type 'd' (DRM and vnpu) is passed to the real ioctl() and
 * reported to the tracer as one SOCK_SEQPACKET message (atomic, so records of
 * several threads and processes never interleave) on the Unix socket named by
 * $VNPU_TRACE_SOCKET:
 *
 *   struct trace_record, then blobs: struct trace_blob + data, 8-byte padded.
 *
 * The argument struct is copied before and after the call (_IOC_SIZE bytes).
 * The arrays it points at (SUBMIT's jobs, their BO and syncobj lists, and the
 * command stream itself, read through the BO's own mmap; SYNCOBJ_WAIT's
 * handles; VERSION's strings) are copied too, because the tracer is another
 * process and they may change once the call returns. Every copy of user
 * memory goes through process_vm_readv on ourselves, so a bad pointer (the
 * very thing a driver developer traces) gives EFAULT here, not a crash.
 *
 * Struct layouts come from uapi/drm/vnpu_accel.h, the ABI's one definition;
 * the tracer decodes the bytes with the same header through cffi.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* drm.h marks user pointers __user, defined away in userspace (the build passes -D__user=). */
#include "drm/vnpu_accel.h"

#define TRACE_MAGIC 0x43525456u /* "VTRC" */
#define TRACE_VERSION 1u
/* A message must fit the socket's send buffer; larger arrays are cut and say so. */
#define MAX_MESSAGE (192u * 1024u)
#define MAX_BLOB (64u * 1024u)

enum trace_tag {
	TAG_ARG_IN = 1,		/* the argument struct before the call */
	TAG_ARG_OUT = 2,	/* after it (for _IOC_READ requests) */
	TAG_FD_PATH = 3,	/* readlink of /proc/self/fd/N */
	TAG_COMM = 4,		/* the process's name */
	TAG_JOBS = 10,		/* SUBMIT: job_count * job_struct_size bytes */
	TAG_JOB_BOS = 11,	/* SUBMIT: job [index]'s drm_vnpu_job_bo array */
	TAG_JOB_IN_SYNCOBJS = 12, /* SUBMIT: job [index]'s in-syncobj handles */
	TAG_JOB_STREAM = 13,	/* SUBMIT: job [index]'s command stream bytes */
	TAG_SYNCOBJ_HANDLES = 20, /* SYNCOBJ_WAIT: the handles */
	TAG_VERSION_NAME = 30,	/* VERSION: the strings after the call */
	TAG_VERSION_DATE = 31,
	TAG_VERSION_DESC = 32,
	TAG_ERROR = 40,		/* text: what could not be captured */
};

struct trace_record {
	uint32_t magic;
	uint32_t version;
	int32_t pid;
	int32_t tid;
	int32_t fd;
	int32_t ret;
	int32_t err; /* errno after the call when ret < 0, else 0 */
	uint32_t nblobs;
	uint64_t request;
	uint64_t t_start_ns; /* CLOCK_MONOTONIC */
	uint64_t t_end_ns;
};

struct trace_blob {
	uint16_t tag;
	uint16_t index;
	uint32_t len;
	uint32_t truncated_from; /* the full length when cut, else 0 */
	uint32_t pad;
};

typedef int (*ioctl_fn)(int, unsigned long, ...);

static ioctl_fn real_ioctl;
static pthread_mutex_t sock_lock = PTHREAD_MUTEX_INITIALIZER;
static int sock_fd = -1;
static pid_t sock_pid;
static ino_t sock_ino;

struct msg {
	unsigned char *buf;
	size_t len;
	struct trace_record *rec;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Copy len bytes of our own memory at addr; -1 (errno EFAULT) for a bad pointer. */
static int safe_copy(void *dst, uint64_t addr, size_t len)
{
	struct iovec local = { dst, len };
	struct iovec remote = { (void *)(uintptr_t)addr, len };

	if (len == 0)
		return 0;
	if (addr == 0) {
		errno = EFAULT;
		return -1;
	}
	return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

static void *blob_space(struct msg *m, uint16_t tag, uint16_t index, size_t len, size_t full)
{
	struct trace_blob *b;
	size_t need = sizeof(*b) + ((len + 7) & ~(size_t)7);

	if (m->len + need > MAX_MESSAGE)
		return NULL;
	b = (struct trace_blob *)(m->buf + m->len);
	memset(b, 0, need);
	b->tag = tag;
	b->index = index;
	b->len = (uint32_t)len;
	b->truncated_from = full > len ? (uint32_t)full : 0;
	m->len += need;
	m->rec->nblobs++;
	return b + 1;
}

static void add_text(struct msg *m, uint16_t tag, uint16_t index, const char *text)
{
	size_t n = strlen(text);
	void *p = blob_space(m, tag, index, n, n);

	if (p)
		memcpy(p, text, n);
}

/* Copy user memory into a blob; on a bad pointer, an error blob says so. */
static void add_user(struct msg *m, uint16_t tag, uint16_t index, uint64_t addr, size_t full)
{
	size_t len = full > MAX_BLOB ? MAX_BLOB : full;
	size_t mark = m->len;
	uint32_t nblobs = m->rec->nblobs;
	void *p = blob_space(m, tag, index, len, full);

	if (!p)
		return;
	if (safe_copy(p, addr, len) < 0) {
		m->len = mark;
		m->rec->nblobs = nblobs;
		add_text(m, TAG_ERROR, tag, "EFAULT: the pointer is not readable");
	}
}

/* The kernel sets each *_len to the string's full length but copies at most the caller's. */
static size_t min_len(size_t a, size_t b)
{
	return a < b ? a : b;
}

static void add_version_strings(struct msg *m, const struct drm_version *in, const struct drm_version *v)
{
	if (v->name && v->name_len)
		add_user(m, TAG_VERSION_NAME, 0, (uintptr_t)v->name, min_len(in->name_len, v->name_len));
	if (v->date && v->date_len)
		add_user(m, TAG_VERSION_DATE, 0, (uintptr_t)v->date, min_len(in->date_len, v->date_len));
	if (v->desc && v->desc_len)
		add_user(m, TAG_VERSION_DESC, 0, (uintptr_t)v->desc, min_len(in->desc_len, v->desc_len));
}

/* The stream of one job, read through a private mapping of its BO. */
static void add_stream(struct msg *m, int fd, uint16_t index, const struct drm_vnpu_job *job)
{
	struct drm_vnpu_bo_info info;
	unsigned char *map;
	size_t len = job->cmd_size > MAX_BLOB ? MAX_BLOB : job->cmd_size;
	void *p;

	memset(&info, 0, sizeof(info));
	info.handle = job->cmd_bo_handle;
	if (real_ioctl(fd, DRM_IOCTL_VNPU_BO_INFO, &info) < 0) {
		add_text(m, TAG_ERROR, TAG_JOB_STREAM, "BO_INFO of the command BO failed");
		return;
	}
	if ((uint64_t)job->cmd_offset + job->cmd_size > info.size) {
		add_text(m, TAG_ERROR, TAG_JOB_STREAM, "the command range lies outside its BO");
		return;
	}
	map = mmap(NULL, info.size, PROT_READ, MAP_SHARED, fd, (off_t)info.mmap_offset);
	if (map == MAP_FAILED) {
		add_text(m, TAG_ERROR, TAG_JOB_STREAM, "mmap of the command BO failed");
		return;
	}
	p = blob_space(m, TAG_JOB_STREAM, index, len, job->cmd_size);
	if (p)
		memcpy(p, map + job->cmd_offset, len);
	munmap(map, info.size);
}

static void add_submit(struct msg *m, int fd, const struct drm_vnpu_submit *s)
{
	size_t stride = s->job_struct_size;
	size_t count = s->job_count;
	unsigned char *jobs;
	size_t i;

	if (stride < sizeof(struct drm_vnpu_job) || count == 0 || count > DRM_VNPU_MAX_JOBS_PER_SUBMIT)
		return; /* the driver refuses it (EINVAL); the struct alone says why */
	jobs = malloc(stride * count);
	if (!jobs)
		return;
	if (safe_copy(jobs, s->jobs, stride * count) < 0) {
		add_text(m, TAG_ERROR, TAG_JOBS, "EFAULT: the jobs pointer is not readable");
		free(jobs);
		return;
	}
	add_user(m, TAG_JOBS, 0, (uintptr_t)jobs, stride * count);
	for (i = 0; i < count; i++) {
		const struct drm_vnpu_job *job = (const void *)(jobs + i * stride);

		if (job->bo_count)
			add_user(m, TAG_JOB_BOS, (uint16_t)i, job->bos,
				 (size_t)job->bo_count * sizeof(struct drm_vnpu_job_bo));
		if (job->in_syncobj_count)
			add_user(m, TAG_JOB_IN_SYNCOBJS, (uint16_t)i, job->in_syncobjs,
				 (size_t)job->in_syncobj_count * sizeof(__u32));
		if (job->cmd_size)
			add_stream(m, fd, (uint16_t)i, job);
	}
	free(jobs);
}

static int connect_socket(void)
{
	const char *path = getenv("VNPU_TRACE_SOCKET");
	struct sockaddr_un addr;
	struct stat st;
	int s;

	if (!path || strlen(path) >= sizeof(addr.sun_path))
		return -1;
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	strcpy(addr.sun_path, path);
	if (connect(s, (struct sockaddr *)&addr, sizeof(addr)) < 0 || fstat(s, &st) < 0) {
		close(s);
		return -1;
	}
	sock_ino = st.st_ino;
	sock_pid = getpid();
	return s;
}

/*
 * Our socket, connected by this process: a forked child connects its own, and
 * a program that closed our descriptor (and maybe reused its number) gets a
 * new one rather than our bytes in its file.
 */
static int trace_socket(void)
{
	struct stat st;

	if (sock_fd >= 0 && sock_pid == getpid() && fstat(sock_fd, &st) == 0 &&
	    S_ISSOCK(st.st_mode) && st.st_ino == sock_ino)
		return sock_fd;
	sock_fd = connect_socket();
	return sock_fd;
}

static void send_record(struct msg *m)
{
	int s;

	pthread_mutex_lock(&sock_lock);
	s = trace_socket();
	if (s >= 0)
		send(s, m->buf, m->len, MSG_NOSIGNAL);
	pthread_mutex_unlock(&sock_lock);
}

int ioctl(int fd, unsigned long request, ...)
{
	va_list ap;
	void *arg;
	struct msg m;
	unsigned int size = _IOC_SIZE(request);
	unsigned int dir = _IOC_DIR(request);
	char path[64], link[256];
	struct drm_version version_in;
	ssize_t n;
	int ret, saved;

	va_start(ap, request);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!real_ioctl)
		real_ioctl = (ioctl_fn)dlsym(RTLD_NEXT, "ioctl");
	if (_IOC_TYPE(request) != DRM_IOCTL_BASE)
		return real_ioctl(fd, request, arg);

	m.buf = malloc(MAX_MESSAGE);
	if (!m.buf)
		return real_ioctl(fd, request, arg);
	m.rec = (struct trace_record *)m.buf;
	memset(m.rec, 0, sizeof(*m.rec));
	m.len = sizeof(*m.rec);
	m.rec->magic = TRACE_MAGIC;
	m.rec->version = TRACE_VERSION;
	m.rec->pid = getpid();
	m.rec->tid = (int32_t)syscall(SYS_gettid);
	m.rec->fd = fd;
	m.rec->request = request;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n > 0) {
		link[n] = 0;
		add_text(&m, TAG_FD_PATH, 0, link);
	}
	n = readlink("/proc/self/exe", link, sizeof(link) - 1);
	if (n > 0) {
		link[n] = 0;
		add_text(&m, TAG_COMM, 0, strrchr(link, '/') ? strrchr(link, '/') + 1 : link);
	}
	if (size)
		add_user(&m, TAG_ARG_IN, 0, (uintptr_t)arg, size);
	if (request == DRM_IOCTL_VNPU_SUBMIT && size == sizeof(struct drm_vnpu_submit)) {
		struct drm_vnpu_submit s;

		if (safe_copy(&s, (uintptr_t)arg, sizeof(s)) == 0)
			add_submit(&m, fd, &s);
	} else if (request == DRM_IOCTL_VERSION) {
		if (safe_copy(&version_in, (uintptr_t)arg, sizeof(version_in)) < 0)
			memset(&version_in, 0, sizeof(version_in));
	} else if (request == DRM_IOCTL_SYNCOBJ_WAIT) {
		struct drm_syncobj_wait w;

		if (safe_copy(&w, (uintptr_t)arg, sizeof(w)) == 0 && w.count_handles)
			add_user(&m, TAG_SYNCOBJ_HANDLES, 0, w.handles,
				 (size_t)w.count_handles * sizeof(__u32));
	}

	m.rec->t_start_ns = now_ns();
	ret = real_ioctl(fd, request, arg);
	saved = errno;
	m.rec->t_end_ns = now_ns();
	m.rec->ret = ret;
	m.rec->err = ret < 0 ? saved : 0;

	if (ret == 0 && size && (dir & _IOC_READ))
		add_user(&m, TAG_ARG_OUT, 0, (uintptr_t)arg, size);
	if (ret == 0 && request == DRM_IOCTL_VERSION) {
		struct drm_version v;

		if (safe_copy(&v, (uintptr_t)arg, sizeof(v)) == 0)
			add_version_strings(&m, &version_in, &v);
	}
	send_record(&m);
	free(m.buf);
	errno = saved;
	return ret;
}
