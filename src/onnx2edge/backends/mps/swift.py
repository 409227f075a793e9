"""Render a lowered graph as a Swift package: Package.swift, Sources/<Model>/<Model>.swift,
the parameter files and a README. Output is a pure function of the graph and options, so two
conversions of one model are byte-identical."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from .core import GPUSegment, Lowered, swift_string

# The CPU segments' Swift: the base (tensors, element-wise, shape ops...) whenever the CPU runs
# anything, and the section from EXTRA_MARK on (integer / quantized ops, recurrent layers, Pad)
# only when the model calls one of its functions, so other models' packages stay as they were.
_SUPPORT_TEXT = (Path(__file__).parent / "cpu_support.swift.txt").read_text()
EXTRA_MARK = "\n// MARK: - Integer tensors"
CPU_SUPPORT, _extra = _SUPPORT_TEXT.split(EXTRA_MARK)
CPU_EXTRA = EXTRA_MARK + _extra
EXTRA_FUNCS = tuple(sorted(set(re.findall(r"\bfunc (cpu\w+)\(", CPU_EXTRA))))

SUPPORT = """
// MARK: - Support types (generated; shared by every layer above)

/// The parameter file (weights.bin, described by weights.json), mapped once. Every layer's
/// data source points into it; MPS copies what it needs when the graph is made.
final class ParameterFile {
    let weightsDataType: MPSDataType
    private let storage: NSData

    init?(url: URL, byteCount: Int, weightsDataType: MPSDataType) {
        guard let storage = try? NSData(contentsOf: url, options: .alwaysMapped),
              storage.length == byteCount else { return nil }
        self.storage = storage
        self.weightsDataType = weightsDataType
    }

    func pointer(offset: Int) -> UnsafeMutableRawPointer {
        UnsafeMutableRawPointer(mutating: storage.bytes.advanced(by: offset))
    }

    /// `count` Float32 values starting at `offset`, copied (PReLU slopes).
    func data(offset: Int, count: Int) -> Data {
        Data(bytes: storage.bytes.advanced(by: offset), count: count * MemoryLayout<Float>.stride)
    }

    /// `count` Float32 values starting at `offset` (constants of the CPU tail).
    func floats(offset: Int, count: Int) -> [Float] {
        Array(UnsafeBufferPointer(
            start: storage.bytes.advanced(by: offset).assumingMemoryBound(to: Float.self), count: count))
    }
}

/// A convolution descriptor in one expression (MPSCNNConvolution.h).
func convolutionDescriptor(
    depthwise: Bool, kernel: (width: Int, height: Int), channels: (input: Int, output: Int),
    stride: (x: Int, y: Int), dilation: (x: Int, y: Int), groups: Int = 1
) -> MPSCNNConvolutionDescriptor {
    let descriptor = depthwise
        ? MPSCNNDepthWiseConvolutionDescriptor(
            kernelWidth: kernel.width, kernelHeight: kernel.height,
            inputFeatureChannels: channels.input, outputFeatureChannels: channels.output)
        : MPSCNNConvolutionDescriptor(
            kernelWidth: kernel.width, kernelHeight: kernel.height,
            inputFeatureChannels: channels.input, outputFeatureChannels: channels.output)
    descriptor.strideInPixelsX = stride.x
    descriptor.strideInPixelsY = stride.y
    descriptor.dilationRateX = dilation.x
    descriptor.dilationRateY = dilation.y
    descriptor.groups = groups
    return descriptor
}

/// Weights and biases of one convolution / fully connected layer, read from the mapped
/// parameter file. Layouts (MPSCNNConvolution.h): convolution OHWI, depthwise [C][kH][kW],
/// fully connected [outputChannels][sourceWidth][sourceHeight][inputChannels]. Biases are
/// Float32 whatever the weights' type.
final class ConvolutionWeights: NSObject, MPSCNNConvolutionDataSource {
    private let parameters: ParameterFile
    private let name: String
    private let convolution: MPSCNNConvolutionDescriptor
    private let weightsOffset: Int
    private let biasOffset: Int
    private let weightsType: MPSDataType

    /// `weightsDataType` overrides the file's weight type for this layer (transposed
    /// convolutions: MPSCNNConvolutionTranspose takes float32 weights only, MPSCNNConvolution.h).
    init(_ parameters: ParameterFile, label: String, descriptor: MPSCNNConvolutionDescriptor,
         weightsOffset: Int, biasOffset: Int, neuron: MPSNNNeuronDescriptor?,
         weightsDataType: MPSDataType? = nil) {
        self.parameters = parameters
        self.name = label
        self.convolution = descriptor
        self.weightsOffset = weightsOffset
        self.biasOffset = biasOffset
        self.weightsType = weightsDataType ?? parameters.weightsDataType
        // Non-optional in Apple's SDK (MPSCNNConvolution.h `__nonnull`): set only a descriptor.
        if let neuron = neuron { descriptor.fusedNeuronDescriptor = neuron }
    }

    func dataType() -> MPSDataType { weightsType }
    /// MPSCNNConvolution.h (iOS 14 / macOS 11): unimplemented, a convolution keeps its weights
    /// in float16 whatever dataType() says. Keep them in the stored type: float32 weights stay
    /// float32; float16 weights (`--fp16`) run in float16 by choice. Earlier systems do not
    /// call it (an optional protocol method; nothing to guard with #available).
    func kernelWeightsDataType() -> MPSDataType { weightsType }
    func descriptor() -> MPSCNNConvolutionDescriptor { convolution }
    func weights() -> UnsafeMutableRawPointer { parameters.pointer(offset: weightsOffset) }
    func biasTerms() -> UnsafeMutablePointer<Float>? {
        parameters.pointer(offset: biasOffset).assumingMemoryBound(to: Float.self)
    }
    // The file stays mapped for the model's lifetime: nothing to load or free per layer.
    func load() -> Bool { true }
    func purge() {}
    func label() -> String? { name }
    // Immutable, so sharing is a valid copy.
    func copy(with zone: NSZone? = nil) -> Any { self }
}

/// Gamma and beta of one InstanceNormalization layer (MPSCNNInstanceNormalization.h).
final class InstanceNormalizationParameters: NSObject, MPSCNNInstanceNormalizationDataSource {
    private let parameters: ParameterFile
    private let name: String
    private let gammaOffset: Int
    private let betaOffset: Int
    private let eps: Float
    let numberOfFeatureChannels: Int

    init(_ parameters: ParameterFile, label: String, channels: Int, gammaOffset: Int, betaOffset: Int,
         epsilon: Float) {
        self.parameters = parameters
        self.name = label
        self.numberOfFeatureChannels = channels
        self.gammaOffset = gammaOffset
        self.betaOffset = betaOffset
        self.eps = epsilon
    }

    func gamma() -> UnsafeMutablePointer<Float>? {
        parameters.pointer(offset: gammaOffset).assumingMemoryBound(to: Float.self)
    }
    func beta() -> UnsafeMutablePointer<Float>? {
        parameters.pointer(offset: betaOffset).assumingMemoryBound(to: Float.self)
    }
    func epsilon() -> Float { eps }
    func label() -> String? { name }
    func copy(with zone: NSZone? = nil) -> Any { self }
    // Required by Apple's Swift interface of the protocol (an @optional initWithCoder: in the
    // header); the parameters live in the package's weights.bin, so there is nothing to decode.
    init?(coder aDecoder: NSCoder) { return nil }
}

/// ONNX's explicit pads as an MPSNNPadding policy (MPSNeuralNetworkTypes.h, `.custom`): the
/// destination gets ONNX's output size and the kernel an offset that puts the window of
/// destination pixel x at x * stride - left (MPS starts it at x * stride + offset.x -
/// (kernelWidth >> 1), kernelWidth taken over the dilated extent).
final class ONNXPadding: NSObject, MPSNNPadding {
    let top: Int, left: Int, bottom: Int, right: Int
    let height: Int, width: Int
    let edgeMode: MPSImageEdgeMode
    /// Average pooling with count_include_pad: the pads count in the divisor.
    let countsPadding: Bool

    init(top: Int, left: Int, bottom: Int, right: Int, height: Int, width: Int,
         edgeMode: MPSImageEdgeMode, countsPadding: Bool = false) {
        self.top = top
        self.left = left
        self.bottom = bottom
        self.right = right
        self.height = height
        self.width = width
        self.edgeMode = edgeMode
        self.countsPadding = countsPadding
    }

    func paddingMethod() -> MPSNNPaddingMethod { .custom }

    func label() -> String { "ONNX pads top \\(top) left \\(left) bottom \\(bottom) right \\(right)" }

    func destinationImageDescriptor(
        forSourceImages sourceImages: [MPSImage], sourceStates: [MPSState]?, for kernel: MPSKernel,
        suggestedDescriptor inDescriptor: MPSImageDescriptor
    ) -> MPSImageDescriptor {
        if let transpose = kernel as? MPSCNNConvolutionTranspose {
            // MPSCNNConvolution.h: the transpose kernel is centred on intermediate (zero-
            // stuffed) pixel x + offset * stride + kernelOffset; ONNX's output x reads
            // intermediate pixels x + left - (k - 1) ... x + left.
            transpose.offset = MPSOffset(x: 0, y: 0, z: 0)
            transpose.kernelOffsetX = left - (transpose.kernelWidth - 1) + (transpose.kernelWidth >> 1)
            transpose.kernelOffsetY = top - (transpose.kernelHeight - 1) + (transpose.kernelHeight >> 1)
            transpose.edgeMode = edgeMode
        } else if let cnn = kernel as? MPSCNNKernel {
            let extentX = (cnn.kernelWidth - 1) * cnn.dilationRateX + 1
            let extentY = (cnn.kernelHeight - 1) * cnn.dilationRateY + 1
            cnn.offset = MPSOffset(x: (extentX >> 1) - left, y: (extentY >> 1) - top, z: 0)
            cnn.edgeMode = edgeMode
            if countsPadding, let average = cnn as? MPSCNNPoolingAverage {
                average.zeroPadSizeX = left
                average.zeroPadSizeY = top
            }
        }
        inDescriptor.width = width
        inDescriptor.height = height
        return inDescriptor
    }

    static var supportsSecureCoding: Bool { true }

    func encode(with coder: NSCoder) {
        for (key, value) in [("top", top), ("left", left), ("bottom", bottom), ("right", right),
                             ("height", height), ("width", width), ("edgeMode", Int(edgeMode.rawValue)),
                             ("countsPadding", countsPadding ? 1 : 0)] {
            coder.encode(value, forKey: key)
        }
    }

    init?(coder: NSCoder) {
        top = coder.decodeInteger(forKey: "top")
        left = coder.decodeInteger(forKey: "left")
        bottom = coder.decodeInteger(forKey: "bottom")
        right = coder.decodeInteger(forKey: "right")
        height = coder.decodeInteger(forKey: "height")
        width = coder.decodeInteger(forKey: "width")
        edgeMode = MPSImageEdgeMode(rawValue: UInt(coder.decodeInteger(forKey: "edgeMode"))) ?? .zero
        countsPadding = coder.decodeInteger(forKey: "countsPadding") != 0
    }
}

/// Names a graph source image after its ONNX input (MPSHandle, MPSNNGraph.sourceImageHandles).
final class ONNXTensorHandle: NSObject, MPSHandle {
    let name: String
    init(name: String) { self.name = name }
    func label() -> String? { name }
    static var supportsSecureCoding: Bool { true }
    func encode(with coder: NSCoder) { coder.encode(name as NSString, forKey: "name") }
    init?(coder: NSCoder) {
        guard let name = coder.decodeObject(of: NSString.self, forKey: "name") else { return nil }
        self.name = name as String
    }
}
"""


def _indent(text: str, n: int) -> str:
    return textwrap.indent(text, " " * n)


def _results(lowered: Lowered) -> list[tuple[str, list[str]]]:
    """The graph's result images: (image expression, ONNX names held in it), graph outputs
    first (the first is what encode returns), then images the CPU tail reads back."""
    results: dict[str, list[str]] = {}
    for name, img in lowered.outputs:
        results.setdefault(img.var, []).append(name)
    for name, _var, img in lowered.gpu_reads:
        if name not in results.setdefault(img.var, []):
            results[img.var].append(name)
    return list(results.items())


def _extra_support(lowered: Lowered) -> str:
    """CPU_EXTRA when the model's CPU statements call one of its functions."""
    code = "\n".join(
        [
            *lowered.head_lines,
            *lowered.cpu_lines,
            *(ln for v in lowered.cpu_segments.values() for ln in v),
        ]
    )
    return CPU_EXTRA if any(f"{f}(" in code for f in EXTRA_FUNCS) else ""


def _segment_results(seg: GPUSegment) -> list[tuple[str, list[str]]]:
    """A graph of a segmented plan: its result images (ONNX outputs first, then what later
    segments read), each with the ONNX names it holds."""
    results: dict[str, list[str]] = {}
    for name, img in [*seg.outputs, *seg.exports.items()]:
        if name not in results.setdefault(img.var, []):
            results[img.var].append(name)
    return list(results.items())


def _graph_var(i: int) -> str:
    return "graph" if i == 0 else f"graph{i + 1}"


def _segment_body(lowered: Lowered, i: int, seg: GPUSegment) -> list[str]:
    """Statements building GPU graph `i` of a segmented plan (in init)."""
    body: list[str] = [f"// GPU graph {i + 1} of {len(lowered.gpu_segments)}", ""]
    sources = [*lowered.inputs, *lowered.uploads] if i == 0 else seg.sources
    for name, var, _img in sources:
        body.append(f"// source image '{name}'")
        body.append(
            f"let {var} = MPSNNImageNode(handle: ONNXTensorHandle(name: {swift_string(name)}))"
        )
        body.append("")
    for layer in seg.layers:
        body += [f"// {c}" for c in layer.comment]
        body += layer.lines
        body.append("")
    k = "" if i == 0 else str(i + 1)
    node_list = textwrap.fill(
        ", ".join(layer.var for layer in seg.layers),
        width=88, break_long_words=False, break_on_hyphens=False,
    )  # fmt: skip
    body.append(
        "// Intermediate images default to float16 in MPSNNGraph; keep float32 (imageFormat)."
    )
    body.append(f"let filterNodes{k}: [MPSNNFilterNode] = [")
    body.append(_indent(node_list, 4))
    body.append("]")
    body.append(f"for node in filterNodes{k} {{ node.resultImage.format = Self.imageFormat }}")
    results = _segment_results(seg)
    body.append("// Every result is read after the graph (by the CPU or a later graph): permanent")
    body.append("// images (MPSImage's allocator, not MPSTemporaryImage's; MPSNNGraphNodes.h).")
    for var, ns in results:
        body.append(f"{var}.handle = ONNXTensorHandle(name: {swift_string(ns[0])})")
        body.append(f"{var}.imageAllocator = MPSImage.defaultAllocator()")
    for var, _ns in results[1:]:
        body.append(f"{var}.exportFromGraph = true")
    body.append(f"var needed{k} = [ObjCBool](repeating: true, count: {len(results)})")
    body.append(
        f"guard let {_graph_var(i)} = MPSNNGraph(\n    device: device, resultImages: "
        f"[{', '.join(v for v, _ in results)}], resultsAreNeeded: &needed{k})\nelse {{ return nil }}"
    )
    if i:
        body.append(f"{_graph_var(i)}.label = {swift_string(f'graph {i + 1}')}")
    body.append("")
    return body


def _render_run_segments(lowered: Lowered, output_names: list[str]) -> str:
    """`run(inputs:)` of a segmented plan: CPU segments and GPU graphs in order."""
    lines = [
        "var images: [String: MPSImage] = [:]  // source and result images, by ONNX name",
        "var gpuResults: [String: [Float]] = [:]  // graph results the CPU reads, ONNX order",
    ]
    for i, seg in enumerate(lowered.gpu_segments):
        cpu = lowered.cpu_segments.get(seg.index - 1, [])
        if cpu:
            lines.append("")
            lines.append(
                "// On the CPU, before the first graph."
                if seg.index == 1
                else f"// On the CPU, between GPU graphs {i} and {i + 1}."
            )
            lines += cpu
        sources = [*lowered.inputs, *lowered.uploads] if i == 0 else seg.sources
        values = [
            f"{swift_string(n)}: {lowered.source_values[n]}.values"
            for n, _, _ in sources
            if n in lowered.source_values
        ]
        results = _segment_results(seg)
        lines.append("")
        lines.append(f"// GPU graph {i + 1}.")
        merged = f"inputs.merging([{', '.join(values)}]) {{ a, _ in a }}" if values else "inputs"
        lines.append(
            f"guard runGraph(graphs[{i}], first: {swift_string(results[0][1][0])}, "
            f"values: {merged}, images: &images) else {{ return nil }}"
        )
        for _var, names in results:
            for alias in names[1:]:
                lines.append(f"images[{swift_string(alias)}] = images[{swift_string(names[0])}]")
        outs = [n for n, _ in seg.outputs]
        read = outs + [n for n in seg.cpu_reads if n not in outs]
        for n in read:
            lines.append(
                f"gpuResults[{swift_string(n)}] = Self.values(of: images[{swift_string(n)}]!)"
            )
    last = lowered.gpu_segments[-1].index
    tail = [ln for k, seg_lines in lowered.cpu_segments.items() if k > last for ln in seg_lines]
    if tail:
        lines.append("")
        lines.append("// On the CPU, after the last graph.")
        lines += tail
    lines.append("")
    lines.append("return [")
    for n in output_names:
        if n in lowered.cpu_outputs:
            lines.append(f"    {swift_string(n)}: {lowered.cpu_outputs[n]}.values,")
        else:
            lines.append(f"    {swift_string(n)}: gpuResults[{swift_string(n)}]!,")
    lines.append("]")
    return f"""
    /// Run one inference and wait for it: `inputs` maps ONNX input names to float32 values in
    /// ONNX (row-major, NCHW) order; returns every ONNX output the same way. The plan's GPU
    /// graphs and CPU segments run in order; each graph's results stay MPSImages for later
    /// graphs, and those the CPU reads are copied out.
    public func run(inputs: [String: [Float]]) -> [String: [Float]]? {{
{_indent(chr(10).join(lines), 8)}
    }}

    /// Encode `graph` on its source images and wait: a source is the image an earlier graph
    /// made (in `images`) or one made from `values`; every result lands in `images` under its
    /// ONNX name (`first`: the one encode returns), synchronised for the CPU (MPSImage.h).
    private func runGraph(
        _ graph: MPSNNGraph, first: String, values: [String: [Float]], images: inout [String: MPSImage]
    ) -> Bool {{
        var sources: [MPSImage] = []
        for handle in graph.sourceImageHandles {{
            guard let name = handle.label() else {{ return false }}
            if let image = images[name] {{
                sources.append(image)
                continue
            }}
            guard let v = values[name], let image = makeInputImage(name),
                  v.count == image.width * image.height * image.featureChannels else {{ return false }}
            v.withUnsafeBytes {{
                image.writeBytes($0.baseAddress!, dataLayout: .featureChannelsxHeightxWidth, imageIndex: 0)
            }}
            images[name] = image
            sources.append(image)
        }}
        guard let commandBuffer = commandQueue.makeCommandBuffer() else {{ return false }}
        let exported = NSMutableArray()
        guard let result = graph.encode(
            to: commandBuffer, sourceImages: sources, sourceStates: nil,
            intermediateImages: exported, destinationStates: nil) else {{ return false }}
        result.synchronize(on: commandBuffer)
        for case let image as MPSImage in exported {{ image.synchronize(on: commandBuffer) }}
        commandBuffer.commit()
        commandBuffer.waitUntilCompleted()
        images[first] = result
        let handles: [MPSHandle] = graph.intermediateImageHandles ?? []
        for (i, handle) in handles.enumerated() where i < exported.count {{
            if let name = handle.label(), let image = exported.object(at: i) as? MPSImage {{
                images[name] = image
            }}
        }}
        return true
    }}

    /// The values of `image` in ONNX's CHW order.
    static func values(of image: MPSImage) -> [Float] {{
        var out = [Float](repeating: 0, count: image.width * image.height * image.featureChannels)
        out.withUnsafeMutableBytes {{
            image.readBytes($0.baseAddress!, dataLayout: .featureChannelsxHeightxWidth, imageIndex: 0)
        }}
        return out
    }}
"""


def render_model(
    lowered: Lowered,
    *,
    class_name: str,
    graph_name: str,
    opset: int,
    fp16: bool,
    shapes: dict[str, list[int]],
    input_names: list[str],
    output_names: list[str],
) -> str:
    multi = bool(lowered.gpu_segments)
    results = _segment_results(lowered.gpu_segments[0]) if multi else _results(lowered)
    first_var, first_names = results[0]
    first_img = next(
        (img for _, img in lowered.outputs if img.var == first_var),
        next((img for _, _, img in lowered.gpu_reads if img.var == first_var), None),
    )
    sources = [*lowered.inputs, *lowered.uploads]
    for seg in lowered.gpu_segments[1:]:  # those made from values (not passed-on images)
        sources += [x for x in seg.sources if x[0] in lowered.source_values or x[0] in input_names]
    sources = list({n: (n, v, i) for n, v, i in reversed(sources)}.values())[::-1]
    assert first_img is not None
    all_inputs = input_names  # ONNX graph order (the harness and callers rely on it)
    input_list = ", ".join(swift_string(n) for n in all_inputs)
    sizes = ",\n".join(
        f"        {swift_string(n)}: (width: {i.w}, height: {i.h}, featureChannels: {i.c})"
        for n, _, i in sources
    )
    shape_list = ",\n".join(
        f"        {swift_string(n)}: {shapes[n]}" for n in [*all_inputs, *output_names]
    )
    body: list[str] = []
    for i, seg in enumerate(lowered.gpu_segments):
        body += _segment_body(lowered, i, seg)
    for name, var, _img in [] if multi else lowered.inputs:
        body.append(f"// ONNX graph input '{name}'")
        body.append(
            f"let {var} = MPSNNImageNode(handle: ONNXTensorHandle(name: {swift_string(name)}))"
        )
        body.append("")
    for name, var, _img in [] if multi else lowered.uploads:
        body.append(f"// '{name}', computed by the CPU head before the graph runs")
        body.append(
            f"let {var} = MPSNNImageNode(handle: ONNXTensorHandle(name: {swift_string(name)}))"
        )
        body.append("")
    for layer in [] if multi else lowered.layers:
        body += [f"// {c}" for c in layer.comment]
        body += layer.lines
        body.append("")
    names = [layer.var for layer in lowered.layers]
    node_list = textwrap.fill(
        ", ".join(names), width=88, break_long_words=False, break_on_hyphens=False
    )
    if multi:
        body.pop()  # the blank line after the last graph
        graphs = ", ".join(_graph_var(i) for i in range(len(lowered.gpu_segments)))
        make_graph = f"self.graphs = [{graphs}]"
    else:
        body.append(
            "// Intermediate images default to float16 in MPSNNGraph; keep float32 (imageFormat)."
        )
        body.append("let filterNodes: [MPSNNFilterNode] = [")
        body.append(_indent(node_list, 4))
        body.append("]")
        body.append("for node in filterNodes { node.resultImage.format = Self.imageFormat }")
    if multi:
        pass
    elif len(results) == 1:
        make_graph = (
            f"guard let graph = MPSNNGraph(device: device, resultImage: {first_var}, "
            "resultImageIsNeeded: true)\nelse { return nil }"
        )
    else:
        body.append("")
        body.append(
            "// Several result images (MPSNNGraph.h initWithDevice:resultImages:resultsAreNeeded:):"
        )
        body.append(
            "// the first is returned by encode, the others come back as intermediate images."
        )
        for var, ns in results:
            body.append(f"{var}.handle = ONNXTensorHandle(name: {swift_string(ns[0])})")
        body.append(
            "// Read on the CPU by run(inputs:): permanent images (an exported image is still an"
        )
        body.append(
            "// MPSTemporaryImage, private GPU storage, unless given MPSImage's allocator; MPSNNGraphNodes.h)."
        )
        for var, _ns in results[1:]:
            body.append(f"{var}.exportFromGraph = true")
            body.append(f"{var}.imageAllocator = MPSImage.defaultAllocator()")
        body.append(f"var needed = [ObjCBool](repeating: true, count: {len(results)})")
        result_list = ", ".join(v for v, _ in results)
        make_graph = (
            f"guard let graph = MPSNNGraph(\n    device: device, resultImages: [{result_list}], "
            "resultsAreNeeded: &needed)\nelse { return nil }"
        )
    weights_type = ".float16" if fp16 else ".float32"
    gpu_only = (
        not multi
        and not lowered.cpu_lines
        and not lowered.head_lines
        and not lowered.cpu_inputs
        and len(results) == 1
    )
    single = ""
    if len(lowered.inputs) == 1 and gpu_only:
        n = lowered.inputs[0][0]
        single = f"""
    /// Encode one inference on `input` (ONNX input '{n}').
    public func encode(to commandBuffer: MTLCommandBuffer, input: MPSImage) -> MPSImage? {{
        encode(to: commandBuffer, inputs: [{swift_string(n)}: input])
    }}

    /// Run one inference on `input` and call `completion` with the result when the GPU is done.
    public func predict(input: MPSImage, completion: @escaping (MPSImage?) -> Void) {{
        predict(inputs: [{swift_string(n)}: input], completion: completion)
    }}
"""
    flat = ""
    if first_img.flat_of:
        flat = " (a flattened view: read it in featureChannelsxHeightxWidth order)"
    gpu_api = ""
    if gpu_only:
        gpu_api = f"""
    /// Run one inference and call `completion` with the result when the GPU is done.
    public func predict(inputs: [String: MPSImage], completion: @escaping (MPSImage?) -> Void) {{
        guard let commandBuffer = commandQueue.makeCommandBuffer(),
              let result = encode(to: commandBuffer, inputs: inputs) else {{
            completion(nil)
            return
        }}
        commandBuffer.addCompletedHandler {{ _ in completion(result) }}
        commandBuffer.commit()
    }}
{single}"""
    run = (
        _render_run_segments(lowered, output_names)
        if multi
        else _render_run(lowered, results, output_names)
    )
    cpu_note = ""
    graphs_decl = ""
    if multi:
        cpu_note = (
            f"\n/// A segmented plan: {len(lowered.gpu_segments)} MPSNNGraphs with Swift on the CPU "
            "before, between and\n/// after them (`run(inputs:)`); `placement` in mps-model.json "
            "lists each node's place and why."
        )
        graphs_decl = (
            "\n    /// Every GPU graph of the plan, in the order `run(inputs:)` encodes them; `graph` "
            "is the first.\n    public let graphs: [MPSNNGraph]"
        )
    elif lowered.cpu_lines or lowered.head_lines:
        cpu_note = (
            "\n/// Nodes MPSNNGraph cannot express run after it on the CPU (`run(inputs:)`, the"
            "\n/// CPU tail at its end); `placement` in mps-model.json lists them with the reason."
        )
    return f"""// Generated by onnx2edge from ONNX graph '{graph_name}' (opset {opset}) for Metal Performance
// Shaders (MPSNNGraph). Regenerate with `onnx2edge convert MODEL --target mps` rather than edit.
// Each block below names the ONNX node(s) it comes from.

import Foundation
import Metal
import MetalPerformanceShaders

/// `{graph_name}` as an MPSNNGraph. Images are ONNX NCHW tensors with batch 1: an MPSImage of
/// width W, height H and C feature channels.{cpu_note}
public final class {class_name} {{
    /// ONNX inputs in the order `encode(to:inputs:)` expects them.
    public static let inputNames: [String] = [{input_list}]
    public static let inputSizes: [String: (width: Int, height: Int, featureChannels: Int)] = [
{sizes}
    ]
    /// ONNX outputs, in the graph's order, as `run(inputs:)` returns them.
    public static let outputNames: [String] = [{", ".join(swift_string(n) for n in output_names)}]
    /// ONNX shapes of the inputs and outputs (row-major float32 in `run(inputs:)`).
    public static let shapes: [String: [Int]] = [
{shape_list}
    ]
    /// The first result image, ONNX '{first_names[0]}': {first_img.w}x{first_img.h}x{first_img.c} (width x height x channels){flat}.
    public static let outputName = {swift_string(first_names[0])}
    public static let outputSize = (width: {first_img.w}, height: {first_img.h}, featureChannels: {first_img.c})
    /// Storage of intermediate and result images. float16 halves memory traffic on a GPU;
    /// onnx2edge verifies float32 against onnxruntime.
    public static let imageFormat: MPSImageFeatureChannelFormat = .float32
    static let parameterBytes = {len(lowered.blob.data)}

    public let device: MTLDevice
    public let graph: MPSNNGraph{graphs_decl}
    private let commandQueue: MTLCommandQueue
    private let parameters: ParameterFile

    /// Build the graph once, with the parameters bundled with this package.
    public convenience init?(device: MTLDevice) {{
        #if SWIFT_PACKAGE
        guard let url = Bundle.module.url(forResource: "weights", withExtension: "bin") else {{ return nil }}
        #else
        guard let url = Bundle.main.url(forResource: "weights", withExtension: "bin") else {{ return nil }}
        #endif
        self.init(device: device, parametersURL: url)
    }}

    /// Build the graph once, with parameters from `parametersURL` (a weights.bin of this model).
    public init?(device: MTLDevice, parametersURL: URL) {{
        guard let parameters = ParameterFile(
                url: parametersURL, byteCount: Self.parameterBytes, weightsDataType: {weights_type}),
              let commandQueue = device.makeCommandQueue() else {{ return nil }}
        self.device = device
        self.parameters = parameters
        self.commandQueue = commandQueue

{_indent(chr(10).join(body), 8)}

{_indent(make_graph, 8)}
        graph.label = {swift_string(class_name)}
        self.graph = graph
    }}

    /// An input image of the right size for ONNX input `name`.
    public func makeInputImage(_ name: String) -> MPSImage? {{
        guard let size = Self.inputSizes[name] else {{ return nil }}
        let descriptor = MPSImageDescriptor(
            channelFormat: .float32, width: size.width, height: size.height, featureChannels: size.featureChannels)
        return MPSImage(device: device, imageDescriptor: descriptor)
    }}

    /// Encode one inference; `inputs` maps ONNX input names to images. Returns the first
    /// result image, valid once `commandBuffer` has completed.
    public func encode(to commandBuffer: MTLCommandBuffer, inputs: [String: MPSImage]) -> MPSImage? {{
        var sources: [MPSImage] = []
        for handle in graph.sourceImageHandles {{
            guard let name = handle.label(), let image = inputs[name] else {{ return nil }}
            sources.append(image)
        }}
        return graph.encode(to: commandBuffer, sourceImages: sources)
    }}
{gpu_api}{run}}}
{SUPPORT}{CPU_SUPPORT if lowered.cpu_lines or lowered.head_lines or multi else ""}{_extra_support(lowered)}"""


def _render_run(
    lowered: Lowered, results: list[tuple[str, list[str]]], output_names: list[str]
) -> str:
    """`run(inputs:)`: the GPU graph, then the CPU tail, on arrays in ONNX order."""
    lines: list[str] = []
    if lowered.head_lines:
        lines.append("// The CPU head: what the graph needs that MPSNNGraph cannot compute.")
        lines += lowered.head_lines
        lines.append("")
    head = ", ".join(
        f"{swift_string(n)}: {lowered.head_vars[n]}.values" for n, _, _ in lowered.uploads
    )
    lines += [
        f"let head: [String: [Float]] = [{head or ':'}]",
        "var sources: [MPSImage] = []",
        "for handle in graph.sourceImageHandles {",
        "    guard let name = handle.label(), let values = inputs[name] ?? head[name],",
        "          let image = makeInputImage(name),",
        "          values.count == image.width * image.height * image.featureChannels else { return nil }",
        "    values.withUnsafeBytes {",
        "        image.writeBytes($0.baseAddress!, dataLayout: .featureChannelsxHeightxWidth, imageIndex: 0)",
        "    }",
        "    sources.append(image)",
        "}",
        "guard let commandBuffer = commandQueue.makeCommandBuffer() else { return nil }",
        "let exported = NSMutableArray()",
        "guard let first = graph.encode(",
        "    to: commandBuffer, sourceImages: sources, sourceStates: nil,",
        "    intermediateImages: exported, destinationStates: nil) else { return nil }",
        "// Every image the CPU reads is synchronised first (MPSImage.h: managed storage on macOS).",
        "first.synchronize(on: commandBuffer)",
        "for case let image as MPSImage in exported { image.synchronize(on: commandBuffer) }",
        "commandBuffer.commit()",
        "commandBuffer.waitUntilCompleted()",
        f"var images: [String: MPSImage] = [{swift_string(results[0][1][0])}: first]",
        "let handles: [MPSHandle] = graph.intermediateImageHandles ?? []",
        "for (i, handle) in handles.enumerated() where i < exported.count {",
        "    if let name = handle.label(), let image = exported.object(at: i) as? MPSImage {",
        "        images[name] = image",
        "    }",
        "}",
        "var gpuResults: [String: [Float]] = [:]",
        "for (name, image) in images { gpuResults[name] = Self.values(of: image) }",
    ]
    for _var, names in results:
        for alias in names[1:]:
            lines.append(
                f"gpuResults[{swift_string(alias)}] = gpuResults[{swift_string(names[0])}]"
            )
    if lowered.cpu_lines:
        lines.append("")
        lines.append(
            "// The CPU tail: nodes MPSNNGraph cannot express, on row-major float32 arrays."
        )
        lines += lowered.cpu_lines
    lines.append("")
    ret = []
    for n in output_names:
        if n in lowered.cpu_outputs:
            ret.append(f"    {swift_string(n)}: {lowered.cpu_outputs[n]}.values,")
        else:
            ret.append(f"    {swift_string(n)}: gpuResults[{swift_string(n)}]!,")
    lines.append("return [")
    lines += ret
    lines.append("]")
    return f"""
    /// Run one inference and wait for it: `inputs` maps ONNX input names to float32 values in
    /// ONNX (row-major, NCHW) order; returns every ONNX output the same way.
    public func run(inputs: [String: [Float]]) -> [String: [Float]]? {{
{_indent(chr(10).join(lines), 8)}
    }}

    /// The values of `image` in ONNX's CHW order.
    static func values(of image: MPSImage) -> [Float] {{
        var out = [Float](repeating: 0, count: image.width * image.height * image.featureChannels)
        out.withUnsafeMutableBytes {{
            image.readBytes($0.baseAddress!, dataLayout: .featureChannelsxHeightxWidth, imageIndex: 0)
        }}
        return out
    }}
"""


def render_package(class_name: str) -> str:
    return f'''// swift-tools-version:5.5
// Generated by onnx2edge. Add this folder to an Xcode project as a local Swift package.
import PackageDescription

let package = Package(
    name: "{class_name}",
    platforms: [.iOS(.v13), .macOS(.v10_15)],
    products: [.library(name: "{class_name}", targets: ["{class_name}"])],
    targets: [
        .target(
            name: "{class_name}",
            resources: [.copy("weights.bin"), .copy("weights.json")]
        )
    ]
)
'''


def render_readme(
    class_name: str, graph_name: str, fp16: bool, n_layers: int, n_bytes: int, graphs: int = 1
) -> str:
    wt = "float16" if fp16 else "float32"
    built = "an `MPSNNGraph`" if graphs == 1 else f"{graphs} `MPSNNGraph`s"
    cpu_where = (
        "before it (head) or after it (tail)"
        if graphs == 1
        else "before, between and after the graphs, in order"
    )
    return f"""# {class_name}: `{graph_name}` for Metal Performance Shaders

Generated by onnx2edge (`onnx2edge convert MODEL --target mps`): a Swift package whose
`{class_name}` class builds the network once as {built} ({n_layers} graph nodes) and
runs it on the GPU.

**How this was checked.** On Linux there is no Metal. onnx2edge compiled this exact Swift
source against its own CPU model of the Metal / MetalPerformanceShaders types it uses (same
type names and initialisers, semantics taken from Apple's headers) and compared the result
with onnxruntime. It was *not* run on Apple hardware; run your own check on a device before
relying on it.

## Files

- `Package.swift`: library product `{class_name}`, iOS 13 / macOS 10.15 or newer.
- `Sources/{class_name}/{class_name}.swift`: the graph, one commented block per ONNX node.
- `Sources/{class_name}/weights.bin`: all parameters ({n_bytes} bytes, weights {wt}, biases
  float32), in MPS layouts.
- `Sources/{class_name}/weights.json`: offset, shape, dtype, layout and sha256 of every tensor
  in `weights.bin`, by layer and ONNX node.

## Use it in an Xcode app

1. File > Add Package Dependencies... > Add Local..., choose this folder; add the
   `{class_name}` library to your app target.
2. In code:

```swift
import MetalPerformanceShaders
import {class_name}

let device = MTLCreateSystemDefaultDevice()!
let model = {class_name}(device: device)!          // builds the MPSNNGraph once
// float32 values in ONNX (row-major, NCHW) order, one array per ONNX input
let outputs = model.run(inputs: [{class_name}.inputNames[0]: values])!
let first = outputs[{class_name}.outputNames[0]]!   // its shape: {class_name}.shapes[name]
```

`run(inputs:)` runs the graph and waits; nodes MPSNNGraph cannot express (if any) run on the
CPU {cpu_where}, so it returns every ONNX output. Images hold ONNX
NCHW tensors with batch 1 (width W, height H, C feature channels); read and write them with
`dataLayout: .featureChannelsxHeightxWidth` to keep ONNX's element order.
To encode the graph alone into your own command buffer (images in, the first result image
out), call `encode(to:inputs:)`.
"""
