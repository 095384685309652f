/* The pod sandbox's process: holds the pod's namespaces, reaps orphans, exits on TERM or INT.
 * Built statically into the local pause image, since registry.k8s.io cannot be reached. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop_action = {.sa_handler = stop};
  struct sigaction reap_action = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &stop_action, NULL);
  sigaction(SIGTERM, &stop_action, NULL);
  sigaction(SIGCHLD, &reap_action, NULL);
  for (;;) pause();
  return EXIT_FAILURE;
}
