module residency/lister

go 1.26.0
