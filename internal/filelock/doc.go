// Package filelock takes and releases advisory whole-file locks on files the caller has
// already opened, so that the caller decides how a lock file is opened (never created
// through a link, never re-created once removed) and keeps the descriptor for as long as
// it needs.
//
// On Unix the lock is flock(2): it belongs to the open file description, so it conflicts
// with every other open of the file, also within one process, and the kernel releases it
// when the last descriptor of that description closes, however the process ends. On
// Windows it is LockFileEx on the file's first byte.
package filelock
