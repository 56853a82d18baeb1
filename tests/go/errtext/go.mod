module errtext

go 1.22
