"""Render a lowered graph as a Swift package: Package.swift, Sources/<Model>/<Model>.swift,
the parameter files and a README. Output is a pure function of the graph and options, so two
conversions of one model are byte-identical."""

from __future__ import annotations

import textwrap

from .lower import Lowered, swift_string

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

    init(_ parameters: ParameterFile, label: String, descriptor: MPSCNNConvolutionDescriptor,
         weightsOffset: Int, biasOffset: Int, neuron: MPSNNNeuronDescriptor?) {
        self.parameters = parameters
        self.name = label
        self.convolution = descriptor
        self.weightsOffset = weightsOffset
        self.biasOffset = biasOffset
        descriptor.fusedNeuronDescriptor = neuron
    }

    func dataType() -> MPSDataType { parameters.weightsDataType }
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


def render_model(
    lowered: Lowered, *, class_name: str, graph_name: str, opset: int, fp16: bool
) -> str:
    out_name, out_img = lowered.output
    input_list = ", ".join(swift_string(n) for n, _, _ in lowered.inputs)
    sizes = ",\n".join(
        f"        {swift_string(n)}: (width: {i.w}, height: {i.h}, featureChannels: {i.c})"
        for n, _, i in lowered.inputs
    )
    body: list[str] = []
    for name, var, _img in lowered.inputs:
        body.append(f"// ONNX graph input '{name}'")
        body.append(
            f"let {var} = MPSNNImageNode(handle: ONNXTensorHandle(name: {swift_string(name)}))"
        )
        body.append("")
    for layer in lowered.layers:
        body += [f"// {c}" for c in layer.comment]
        body += layer.lines
        body.append("")
    names = [layer.var for layer in lowered.layers]
    node_list = textwrap.fill(
        ", ".join(names), width=88, break_long_words=False, break_on_hyphens=False
    )
    body.append(
        "// Intermediate images default to float16 in MPSNNGraph; keep float32 (imageFormat)."
    )
    body.append("let filterNodes: [MPSNNFilterNode] = [")
    body.append(_indent(node_list, 4))
    body.append("]")
    body.append("for node in filterNodes { node.resultImage.format = Self.imageFormat }")
    result_var = out_img.var
    weights_type = ".float16" if fp16 else ".float32"
    single = ""
    if len(lowered.inputs) == 1:
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
    if out_img.flat_of:
        flat = " (a flattened view: read it in featureChannelsxHeightxWidth order)"
    return f"""// Generated by onnx2edge from ONNX graph '{graph_name}' (opset {opset}) for Metal Performance
// Shaders (MPSNNGraph). Regenerate with `onnx2edge convert MODEL --target mps` rather than edit.
// Each block below names the ONNX node(s) it comes from.

import Foundation
import Metal
import MetalPerformanceShaders

/// `{graph_name}` as an MPSNNGraph. Images are ONNX NCHW tensors with batch 1: an MPSImage of
/// width W, height H and C feature channels.
public final class {class_name} {{
    /// ONNX inputs in the order `encode(to:inputs:)` expects them.
    public static let inputNames: [String] = [{input_list}]
    public static let inputSizes: [String: (width: Int, height: Int, featureChannels: Int)] = [
{sizes}
    ]
    /// ONNX output '{out_name}': {out_img.w}x{out_img.h}x{out_img.c} (width x height x channels){flat}.
    public static let outputName = {swift_string(out_name)}
    public static let outputSize = (width: {out_img.w}, height: {out_img.h}, featureChannels: {out_img.c})
    /// Storage of intermediate and result images. float16 halves memory traffic on a GPU;
    /// onnx2edge verifies float32 against onnxruntime.
    public static let imageFormat: MPSImageFeatureChannelFormat = .float32
    static let parameterBytes = {len(lowered.blob.data)}

    public let device: MTLDevice
    public let graph: MPSNNGraph
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

        guard let graph = MPSNNGraph(device: device, resultImage: {result_var}, resultImageIsNeeded: true)
        else {{ return nil }}
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

    /// Encode one inference; `inputs` maps ONNX input names to images. Returns the result
    /// image, valid once `commandBuffer` has completed.
    public func encode(to commandBuffer: MTLCommandBuffer, inputs: [String: MPSImage]) -> MPSImage? {{
        var sources: [MPSImage] = []
        for handle in graph.sourceImageHandles {{
            guard let name = handle.label(), let image = inputs[name] else {{ return nil }}
            sources.append(image)
        }}
        return graph.encode(to: commandBuffer, sourceImages: sources)
    }}

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
{single}}}
{SUPPORT}"""


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


def render_readme(class_name: str, graph_name: str, fp16: bool, n_layers: int, n_bytes: int) -> str:
    wt = "float16" if fp16 else "float32"
    return f"""# {class_name}: `{graph_name}` for Metal Performance Shaders

Generated by onnx2edge (`onnx2edge convert MODEL --target mps`): a Swift package whose
`{class_name}` class builds the network once as an `MPSNNGraph` ({n_layers} graph nodes) and
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
let input = model.makeInputImage({class_name}.inputNames[0])!
// fill `input`, e.g. input.writeBytes(pointer, dataLayout: .featureChannelsxHeightxWidth, imageIndex: 0)
model.predict(inputs: [{class_name}.inputNames[0]: input]) {{ result in
    // result: MPSImage, {class_name}.outputSize; read it with readBytes(...)
}}
```

Images hold ONNX NCHW tensors with batch 1 (width W, height H, C feature channels); read and
write them with `dataLayout: .featureChannelsxHeightxWidth` to keep ONNX's element order.
To encode into your own command buffer, call `encode(to:inputs:)` instead of `predict`.
"""
