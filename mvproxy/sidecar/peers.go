package sidecar

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// PeerUser is the user a sidecar names when it fetches a peer's discovery.
const PeerUser = "system:kplug:peerproxy"

// PeerWatcher follows the sidecars' identity Leases and keeps each peer's discovery in
// the Directory: it fetches it when a peer appears or restarts (a new holder), when the
// peer says what it serves changed (DiscoveryAnnotation), every Refresh, and again with
// backoff after a failure; it forgets a peer whose Lease is deleted. Its fields must not change once Run is called.
type PeerWatcher struct {
	Client    kubernetes.Interface
	Namespace string
	Directory *mvproxy.Directory
	// PeerClient reaches peers; its transport verifies them with the peer CA.
	PeerClient *http.Client
	// Timeout bounds one discovery fetch; Refresh is the period of refetching all peers.
	Timeout, Refresh time.Duration
	Metrics          *mvproxy.Metrics
	Logger           *slog.Logger
}

// Run watches until ctx ends. It marks the Directory's peers synced once every peer
// found at start was asked for its discovery.
func (w *PeerWatcher) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(w.Client, 0,
		informers.WithNamespace(w.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LeaseLabel + "=" + LeaseLabelValue }))
	leases := factory.Coordination().V1().Leases()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, 30*time.Second))
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			_, name, _ := cache.SplitMetaNamespaceKey(key)
			queue.Add(name)
		}
	}
	_, _ = leases.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		DeleteFunc: enqueue,
		UpdateFunc: func(oldObj, newObj any) {
			o, n := oldObj.(*coordinationv1.Lease), newObj.(*coordinationv1.Lease)
			// Renewals change only the renew time: nothing to do.
			if !ptrEqual(o.Spec.HolderIdentity, n.Spec.HolderIdentity) || o.Annotations[AddressAnnotation] != n.Annotations[AddressAnnotation] ||
				o.Annotations[DiscoveryAnnotation] != n.Annotations[DiscoveryAnnotation] {
				enqueue(newObj)
			}
		},
	})
	// In the sidecar's log, not klog's: one format, and an operator reads why (a 403 is
	// the RBAC of docs/peerproxy-rbac.yaml missing; Serve ends on it after a grace).
	_ = leases.Informer().SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		switch {
		case ctx.Err() != nil || errors.Is(err, io.EOF):
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, io.ErrUnexpectedEOF):
			w.Logger.Debug("watch of identity leases closed", "namespace", w.Namespace, "err", err)
		default:
			w.Logger.Warn("watching identity leases", "namespace", w.Namespace, "err", err)
		}
	})
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), leases.Informer().HasSynced) {
		return
	}
	lister := leases.Lister().Leases(w.Namespace)
	syncName := func(name string) error {
		l, err := lister.Get(name)
		if apierrors.IsNotFound(err) {
			w.Directory.RemovePeer(name)
			return nil
		}
		if err != nil {
			return err
		}
		return w.syncPeer(ctx, l)
	}

	initial, _ := lister.List(labels.Everything())
	var wg sync.WaitGroup
	for _, l := range initial {
		wg.Go(func() { _ = w.syncPeer(ctx, l) })
	}
	wg.Wait()
	w.Directory.MarkPeersSynced()

	var workers sync.WaitGroup
	for range 2 {
		workers.Go(func() {
			for {
				name, shutdown := queue.Get()
				if shutdown {
					return
				}
				if err := syncName(name); err != nil && ctx.Err() == nil {
					queue.AddRateLimited(name)
				} else {
					queue.Forget(name)
				}
				queue.Done(name)
			}
		})
	}
	tick := time.NewTicker(w.Refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			queue.ShutDown()
			workers.Wait()
			return
		case <-tick.C:
			for _, p := range w.Directory.Peers() {
				queue.Add(p.ID)
			}
		}
	}
}

// syncPeer records the peer a Lease advertises and fetches its discovery.
func (w *PeerWatcher) syncPeer(ctx context.Context, l *coordinationv1.Lease) error {
	if l.Name == w.Directory.Self() {
		return nil
	}
	info, ok, err := peerFromLease(l)
	if !ok || err != nil {
		if err != nil {
			w.Metrics.DiscoverySyncError(mvproxy.SyncErrorHostPortResolution)
			w.Logger.Warn("ignoring peer", "err", err)
		}
		w.Directory.RemovePeer(l.Name)
		return nil // nothing to retry until the Lease changes
	}
	if w.Directory.SetPeer(info) {
		w.Logger.Info("peer joined or restarted", "peer", info.ID, "address", info.Address)
	}
	fctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	header := http.Header{}
	mvproxy.SetIdentityHeaders(header, &mvproxy.Identity{Name: PeerUser, Groups: []string{"system:authenticated"}})
	header.Set(mvproxy.ProxiedHeader, "true")
	doc, err := discovery.Fetch(fctx, w.PeerClient, "https://"+info.Address, header)
	if err != nil {
		w.Metrics.DiscoverySyncError(mvproxy.SyncErrorFetchDiscovery)
		w.Logger.Warn("fetching peer discovery", "peer", info.ID, "err", err)
		w.Directory.SetPeerStale(info.ID, info.Holder)
		return err
	}
	w.Directory.SetPeerDocument(info.ID, info.Holder, doc)
	return nil
}

func ptrEqual(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
