package main

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func clientConfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	// as rollguard's client: no client-side throttling in the way of a list
	cfg.QPS, cfg.Burst = -1, 0
	return cfg, nil
}
