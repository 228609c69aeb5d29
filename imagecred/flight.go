package imagecred

import (
	"context"

	"golang.org/x/sync/singleflight"
)

// flights shares one run of a function among the concurrent callers that ask for the same
// key. Its cancellation policy, the same for every caller:
//
//   - The run belongs to no caller. It gets the first caller's context values but not its
//     cancellation or deadline; what bounds it is the function's own timeout (the plugin
//     timeout). So a caller that gives up neither stops the run for the others nor turns
//     it into a failure that would be reported to them, or remembered.
//   - Each caller waits until the run ends or its own context ends, whichever is first,
//     and in the second case gets its context's error, which is its own and is never
//     recorded as the run's result.
//
// The zero value is ready to use; it is safe for concurrent use.
type flights struct {
	group singleflight.Group
	// joined, if set, is called once a caller is part of a run (tests).
	joined func()
}

// do runs fn for key, or joins the run in progress for key, under the policy above.
func (f *flights) do(ctx context.Context, key string, fn func(context.Context) (any, error)) (any, error) {
	detached := context.WithoutCancel(ctx)
	ch := f.group.DoChan(key, func() (any, error) { return fn(detached) })
	if f.joined != nil {
		f.joined()
	}
	select {
	case r := <-ch:
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
