//go:build go1.27

package reverseproxy

import "net/http"

func setMaxHeaderValues(srv *http.Server, n int) { srv.MaxHeaderValueCount = n }
