/* A host without Python: dlopen libteflon.so as TFLite's external delegate loader does
   (RTLD_LAZY | RTLD_LOCAL), create and destroy a delegate, then check that a bad option is
   reported through report_error (the 4th argument of tflite_plugin_create_delegate), and with
   report_error NULL on stderr.
   Usage: plugin_dlopen LIBTEFLON DEVICE; exit 0 when all holds. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void *(*create_fn)(char **keys, char **values, size_t count, void (*report_error)(const char *));
typedef void (*destroy_fn)(void *delegate);

static int reports;
static char last_report[4096];

static void report_error(const char *message)
{
    reports++;
    snprintf(last_report, sizeof last_report, "%s", message);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBTEFLON DEVICE\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    create_fn create = (create_fn)dlsym(lib, "tflite_plugin_create_delegate");
    destroy_fn destroy = (destroy_fn)dlsym(lib, "tflite_plugin_destroy_delegate");
    if (!create || !destroy) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 1;
    }
    char *keys[] = {"device", "log_level"};
    char *values[] = {argv[2], "verbose"};
    void *delegate = create(keys, values, 2, report_error);
    if (!delegate) {
        fprintf(stderr, "create failed (%d reports): %s\n", reports, last_report);
        return 1;
    }
    destroy(delegate);
    char *bad_keys[] = {"bogus"};
    char *bad_values[] = {"1"};
    void *bad = create(bad_keys, bad_values, 1, report_error);
    if (bad || reports != 1 || !strstr(last_report, "unknown option 'bogus'")) {
        fprintf(stderr, "bad option: delegate %p, %d reports, last: %s\n", bad, reports, last_report);
        return 1;
    }
    printf("report_error: %s\n", last_report);
    if (create(bad_keys, bad_values, 1, NULL) || reports != 1) {
        fprintf(stderr, "bad option without report_error: a delegate, or %d reports\n", reports);
        return 1;
    }
    return 0;
}
