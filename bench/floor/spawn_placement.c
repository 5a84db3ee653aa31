/* Where a spawned job's first CPU comes from (docs/scale.md, "The process-node floor").
 * Times posix_spawn of /bin/true + waitpid, 300 times after a 0.5 ms nap each, three ways:
 *   0  posix_spawn as the sidecar does (own process group);
 *   1  the spawning thread pinned to its CPU (the child inherits it), the child's CPU set
 *      widened by the parent once posix_spawn returns;
 *   2  vfork from a pinned thread, the child widening its own CPU set before execve.
 * `race N` runs /usr/bin/nproc N times with 1 and 2 and counts how often it saw one CPU:
 * way 1 lets the job start on the narrowed set (it ran before the parent widened it).
 * Build: cc -O2 -o /tmp/spawn_placement bench/floor/spawn_placement.c
 * Run:   /tmp/spawn_placement [GAP_US]   or   /tmp/spawn_placement race 300 */
#define _GNU_SOURCE
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

extern char **environ;
static cpu_set_t all;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static pid_t spawn(int way, char *prog, int out) {
    pid_t pid = -1;
    cpu_set_t one;
    char *argv[] = {prog, NULL};
    if (way) {
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu(), &one);
        sched_setaffinity(0, sizeof one, &one);
    }
    if (way == 2) {
        pid = vfork();
        if (pid == 0) {
            setpgid(0, 0);
            if (out >= 0) dup2(out, 1);
            sched_setaffinity(0, sizeof all, &all);
            execve(prog, argv, environ);
            _exit(127);
        }
    } else {
        posix_spawnattr_t attr;
        posix_spawn_file_actions_t fa;
        posix_spawnattr_init(&attr);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup(&attr, 0);
        posix_spawn_file_actions_init(&fa);
        if (out >= 0) posix_spawn_file_actions_adddup2(&fa, out, 1);
        posix_spawn(&pid, prog, &fa, &attr, argv, environ);
        posix_spawnattr_destroy(&attr);
        posix_spawn_file_actions_destroy(&fa);
    }
    if (way) {
        sched_setaffinity(0, sizeof all, &all);
        if (way == 1) sched_setaffinity(pid, sizeof all, &all);
    }
    return pid;
}

int main(int argc, char **argv) {
    sched_getaffinity(0, sizeof all, &all);
    if (argc > 2 && !strcmp(argv[1], "race")) {
        int n = atoi(argv[2]);
        for (int way = 1; way <= 2; way++) {
            int p[2], ones = 0;
            if (pipe(p)) return 1;
            for (int i = 0; i < n; i++) {
                usleep(500);
                pid_t pid = spawn(way, "/usr/bin/nproc", p[1]);
                waitpid(pid, 0, 0);
                char buf[16] = {0};
                if (read(p[0], buf, sizeof buf - 1) > 0 && buf[0] == '1' && buf[1] == '\n') ones++;
            }
            printf("way %d: nproc saw one CPU in %d of %d\n", way, ones, n);
        }
        return 0;
    }
    int gap = argc > 1 ? atoi(argv[1]) : 500, n = 300;
    const char *names[] = {"posix_spawn", "pinned, widened after", "vfork, widened before exec"};
    static double t[300];
    for (int round = 0; round < 3; round++) {
        for (int way = 0; way < 3; way++) {
            for (int i = 0; i < n; i++) {
                if (gap) usleep(gap);
                double s = now_ms();
                pid_t pid = spawn(way, "/bin/true", -1);
                waitpid(pid, 0, 0);
                t[i] = now_ms() - s;
            }
            qsort(t, n, sizeof t[0], cmp);
            printf("%-28s median %.3f ms, p90 %.3f ms\n", names[way], t[n / 2], t[n * 9 / 10]);
        }
    }
    return 0;
}
