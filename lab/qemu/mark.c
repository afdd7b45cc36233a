// mark is the marker program of the insncount QEMU plugin: its only code
// is linked at 0x13370000, and the plugin writes out and resets its
// instruction counts whenever a block there runs. It does nothing but
// exit.
//
// Build: gcc -O2 -static -nostdlib -fno-pie -no-pie \
//            -Wl,--section-start=.text=0x13370000 -o mark mark.c
void _start(void)
{
	__asm__ volatile("mov $60, %eax\n\txor %edi, %edi\n\tsyscall");
	__builtin_unreachable();
}
