module github.com/onehost/onehost/bench/experiments

go 1.26.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/lesismal/nbio v1.6.8
	github.com/onehost/onehost v0.0.0
	github.com/panjf2000/gnet/v2 v2.9.7
	golang.org/x/sys v0.50.0
)

require (
	github.com/panjf2000/ants/v2 v2.11.3 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
)

replace github.com/onehost/onehost => ../..
