// The controller-runtime peer of rollguard, for benchmarks only: the same webhook (the same
// annotations, the same patch result) behind controller-runtime's webhook server, and a
// metadata-only cache of ConfigMaps and Secrets through the manager's cache.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap/zapcore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

type options struct {
	host, certDir, namespaces, versions string
	port, adminPort                     int
	cached                              bool
	patch                               string
}

func main() {
	var o options
	flag.StringVar(&o.host, "host", "127.0.0.1", "address of the webhook server")
	flag.IntVar(&o.port, "port", 9443, "port of the webhook server")
	flag.StringVar(&o.certDir, "cert-dir", "", "folder holding tls.crt and tls.key")
	flag.IntVar(&o.adminPort, "admin-port", 0, "plain HTTP port on 127.0.0.1 for /latency, /memory, /cache, /synced")
	flag.BoolVar(&o.cached, "cache", false, "versions from the manager's metadata cache (--kubeconfig, registered by controller-runtime); else from --versions")
	flag.StringVar(&o.namespaces, "namespaces", "", "comma-separated namespaces the cache covers; empty: all")
	flag.StringVar(&o.versions, "versions", "", `static versions: {"default": {uid, resourceVersion, ignored} | null, "objects": {"Kind/ns/name": {...} | null}}`)
	flag.StringVar(&o.patch, "patch", "raw", "raw: PatchResponseFromRaw (marshal the patched object, diff it with the one sent); direct: the JSON Patch written from the annotations that change")
	flag.Parse()
	if o.patch != "raw" && o.patch != "direct" {
		fmt.Fprintln(os.Stderr, "peer: --patch is raw or direct, not", o.patch)
		os.Exit(2)
	}
	// errors only: a line per start and stop would clutter the benchmark's table
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	hist := newLatencyHistogram()
	synced := &atomic.Bool{}
	admin := http.NewServeMux()
	admin.Handle("/latency", hist)
	admin.HandleFunc("/memory", func(w http.ResponseWriter, _ *http.Request) {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		writeJSON(w, map[string]uint64{"heapAlloc": m.HeapAlloc, "heapInuse": m.HeapInuse, "sys": m.Sys})
	})
	admin.HandleFunc("/synced", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, synced.Load()) })
	server := webhook.NewServer(webhook.Options{Host: o.host, Port: o.port, CertDir: o.certDir})
	annotator := &restartAnnotator{synced: synced, direct: o.patch == "direct"}
	server.Register("/mutate", hist.wrap(&webhook.Admission{Handler: annotator}))

	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", o.adminPort))
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(listener, admin) }()
	fmt.Printf("admin %d\n", listener.Addr().(*net.TCPAddr).Port)

	if !o.cached {
		lookup, err := staticLookup(o.versions)
		if err != nil {
			return err
		}
		annotator.lookup = lookup
		synced.Store(true)
		return server.Start(ctx)
	}

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// as rollguard's client: no client-side throttling in the way of a list
	cfg.QPS, cfg.Burst = -1, 0
	cacheOpts := cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
	if o.namespaces != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range strings.Split(o.namespaces, ",") {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          server,
	})
	if err != nil {
		return err
	}
	// the manager runs its webhook server once asked for it
	_ = mgr.GetWebhookServer()
	metaCache := mgr.GetCache()
	annotator.lookup = cacheLookup(metaCache)
	admin.HandleFunc("/cache", func(w http.ResponseWriter, r *http.Request) { dumpCache(r.Context(), w, metaCache) })
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		for _, kind := range []string{configMapKind, secretKind} {
			if _, err := metaCache.GetInformer(ctx, partialMetadata(kind)); err != nil {
				return err
			}
		}
		if !metaCache.WaitForCacheSync(ctx) {
			return fmt.Errorf("caches did not sync")
		}
		synced.Store(true)
		fmt.Println("synced")
		<-ctx.Done()
		return nil
	})); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

func partialMetadata(kind string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind}}
}

func cacheLookup(c cache.Cache) versionLookup {
	return func(kind, namespace, name string) *objectVersion {
		obj := partialMetadata(kind)
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, obj); err != nil {
			return nil
		}
		return &objectVersion{UID: string(obj.UID), ResourceVersion: obj.ResourceVersion, Ignored: obj.Labels[ignoreLabel] == "true"}
	}
}

type cachedObject struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	objectVersion
}

// dumpCache lists what the cache holds, in the fields rollguard's cache keeps.
func dumpCache(ctx context.Context, w http.ResponseWriter, c cache.Cache) {
	var out []cachedObject
	for _, kind := range []string{configMapKind, secretKind} {
		items := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind + "List"}}
		if err := c.List(ctx, items, client.UnsafeDisableDeepCopy); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for _, it := range items.Items {
			if len(it.ManagedFields) > 0 {
				http.Error(w, "managedFields kept for "+it.Namespace+"/"+it.Name, http.StatusInternalServerError)
				return
			}
			out = append(out, cachedObject{kind, it.Namespace, it.Name, objectVersion{string(it.UID), it.ResourceVersion, it.Labels[ignoreLabel] == "true"}})
		}
	}
	writeJSON(w, out)
}

type staticVersions struct {
	Default *objectVersion            `json:"default"`
	Objects map[string]*objectVersion `json:"objects"`
}

func staticLookup(path string) (versionLookup, error) {
	var v staticVersions
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("--versions %s: %w", path, err)
		}
	}
	return func(kind, namespace, name string) *objectVersion {
		if version, ok := v.Objects[kind+"/"+namespace+"/"+name]; ok {
			return version
		}
		return v.Default
	}, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
