with torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
    on_trace_ready=lambda prof: prof.export_chrome_trace("trace.json")
) as prof:
    for inputs, labels in data_loader:
        outputs = model(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
prof.export_chrome_trace("trace.json")  # 导出性能分析报告
