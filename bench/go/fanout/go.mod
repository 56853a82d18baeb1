module residency/fanout

go 1.26.0
