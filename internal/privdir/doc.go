// Package privdir creates and checks the private directories kplug writes secrets and
// sockets into, and creates files in them without following links.
//
// On a shared host another user may create a directory kplug expects to own (a per-user
// directory in /tmp, say) before kplug does, and plant symbolic links or FIFOs in it. So
// every directory kplug writes into is checked before anything is written: a real directory
// (never a symbolic link), owned by the effective user, that no other user can enter or
// write. Files are then created with O_EXCL and O_NOFOLLOW, and existing files are opened
// only when they are regular files, without blocking on a FIFO.
//
// On Windows the owner and mode are not checked (access there is governed by ACLs, which
// a user's profile directories already restrict); symbolic links are still refused.
package privdir
