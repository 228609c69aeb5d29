// Package cli is kplug's command line: one file per subcommand, each turning flags into an
// options struct and calling the library. It owns the process-level contract: results on
// stdout, logs on stderr, exit 0 on success, 1 on failure, 2 on usage or configuration errors.
package cli
