module residency/leasegen

go 1.26.0
