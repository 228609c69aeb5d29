//go:build !go1.27

package reverseproxy

import "net/http"

// setMaxHeaderValues does nothing: http.Server counts no header values before Go 1.27.
func setMaxHeaderValues(*http.Server, int) {}
