/* What the hardware charges for a crossing between two processes over loopback TCP: a
 * ping-pong of small messages, each end pinned to its core and spinning on a non-blocking
 * receive, over LINKS connections: 1, one carrying both ways (as two remote workers' program
 * links are since they carry values both ways), or 2, one each way (as they were: each message
 * then has an acknowledgement of its own, sent by the reader's receive). Prints the median
 * one-way time over rounds, in microseconds.
 *
 *     cc -O2 -o pingpong pingpong.c && ./pingpong BYTES ROUNDS CORE_A CORE_B [LINKS]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../probes.h"

enum { TRIPS = 2000 };

static int listener(int* port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (bind(s, (struct sockaddr*)&a, sizeof a) != 0 || listen(s, 1) != 0) exit(1);
  getsockname(s, (struct sockaddr*)&a, &len);
  *port = ntohs(a.sin_port);
  return s;
}

static int dial(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(s, (struct sockaddr*)&a, sizeof a) != 0) exit(1);
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return s;
}

static void take(int s, char* buf, int bytes) {
  for (int got = 0; got < bytes;) {
    ssize_t n = recv(s, buf + got, bytes - got, MSG_DONTWAIT);
    if (n > 0) got += (int)n;
    if (n == 0) exit(1);
  }
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) return 2;
  int bytes = atoi(argv[1]), rounds = atoi(argv[2]), links = argc == 6 ? atoi(argv[5]) : 1;
  if (bytes < 1 || bytes > 65536 || rounds < 1 || links < 1 || links > 2) return 2;
  char* buf = calloc(1, (size_t)bytes);
  int port_a, port_b, to_a = listener(&port_a), to_b = listener(&port_b);
  pid_t child = fork();
  if (child == 0) {
    pin(atoi(argv[4]));
    int out = dial(port_a), in = links == 2 ? accept(to_b, NULL, NULL) : out;
    for (long i = 0; i < (long)rounds * TRIPS; i++) {
      take(in, buf, bytes);
      send(out, buf, bytes, 0);
    }
    _exit(0);
  }
  pin(atoi(argv[3]));
  int in = accept(to_a, NULL, NULL), out = in;
  if (links == 2) {
    out = dial(port_b);
  } else {
    int one = 1;
    setsockopt(in, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  double* one_way = malloc(sizeof(double) * rounds);
  for (int r = 0; r < rounds; r++) {
    double start = now_s();
    for (int i = 0; i < TRIPS; i++) {
      send(out, buf, bytes, 0);
      take(in, buf, bytes);
    }
    one_way[r] = (now_s() - start) / TRIPS / 2 * 1e6;
  }
  waitpid(child, NULL, 0);
  qsort(one_way, rounds, sizeof(double), by_value);
  printf("%.3f\n", one_way[rounds / 2]);
  return 0;
}
