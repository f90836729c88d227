#!/bin/busybox sh
# SPDX-License-Identifier: MIT
# /init of the system-sleep guest (qemu_tests/system_sleep.py): its root is this initramfs, which
# a suspend of every device leaves intact. Loads vnpu.ko and its dependencies in the order
# /modules.order lists them, picks the deepest sleep the guest offers (or /sleep.conf's "STATE
# LEVEL"), runs the client and powers off. Every failure ends in a "VNPU-SLEEP: FAIL: why" line.
/bin/busybox --install -s /bin
export PATH=/bin

verdict_fail() {
	echo "VNPU-SLEEP: FAIL: $*"
	poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t debugfs debugfs /sys/kernel/debug || verdict_fail "cannot mount debugfs"
echo "init: kernel $(uname -r); /sys/power/state: $(cat /sys/power/state);" \
	"mem_sleep: $(cat /sys/power/mem_sleep 2>/dev/null); pm_test: $(cat /sys/power/pm_test 2>/dev/null)"

while read -r module params; do
	insmod "/lib/modules/$module" $params || verdict_fail "insmod $module failed (see the kernel log above)"
done < /modules.order
i=0
while [ ! -e /dev/accel/accel0 ]; do
	i=$((i + 1))
	[ $i -gt 100 ] && verdict_fail "vnpu.ko loaded but no /dev/accel/accel0 appeared in 10 s (see the kernel log above)"
	sleep 0.1
done

# The deepest pm_test level each state supports: suspend-to-idle stops at platform; S3 ("mem",
# mem_sleep "deep") goes on through the non-boot CPUs and the syscore phase.
read -r state level < /sleep.conf
if [ "$state" = auto ]; then
	if grep -qw mem /sys/power/state && grep -qw deep /sys/power/mem_sleep; then
		state=mem level=core
	elif grep -qw freeze /sys/power/state; then
		state=freeze level=platform
	else
		verdict_fail "the guest offers no sleep state (/sys/power/state: $(cat /sys/power/state))"
	fi
fi
[ -e /sys/power/pm_test ] || verdict_fail "no /sys/power/pm_test: the kernel lacks CONFIG_PM_DEBUG"
grep -qw "$level" /sys/power/pm_test || verdict_fail "pm_test has no level $level: $(cat /sys/power/pm_test)"

/system_sleep "$state" "$level"
echo "init: the client exited with $?"
poweroff -f
