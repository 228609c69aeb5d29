//go:build windows

package proxyplugin

import (
	"errors"
	"io/fs"
)

// installedLike refuses on Windows: who may replace a file there is in its ACL and its
// directory's, which kplug does not read, so kplug serves itself (issue 33 review, F4).
func installedLike(string, fs.FileInfo, string) error {
	return errors.New("on Windows kplug does not check who may replace the program beside it, so it serves itself")
}
