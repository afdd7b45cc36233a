// sleeper wakes 100 times a second and does nothing else, as the Go
// runtime's monitor thread does in every busy Go process: run one per
// CPU beside a C program, it shows what such wakes cost a program that
// has none of its own (lab/timer-wakes.sh).
//
// Build: gcc -O2 -static -o sleeper sleeper.c
#include <time.h>

int main(void)
{
	const struct timespec t = {0, 10 * 1000 * 1000};
	for (;;)
		nanosleep(&t, 0);
}
