/* Both uapi headers compile with -Wall -Werror from the -I option given. */
#include <drm/vnpu_accel.h>
#include <drm/vnpu_isa.h>
int main(void) { return sizeof(struct drm_vnpu_submit) == 0; }
