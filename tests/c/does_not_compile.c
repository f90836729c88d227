/* A client that does not compile (an undeclared name): tests/qemu_tests/test_system_sleep.py checks
 * that the harness reports gcc's error as one line. */
int main(void) { return undeclared; }
